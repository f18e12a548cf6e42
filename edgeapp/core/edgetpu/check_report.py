"""The `edgeapp check` report: the verdict, summary, warnings and advice of a prediction.

`edgetpu_rules.predict` says, per operator, what the Edge TPU compiler will map; this module
turns those predictions into what a user reads: shares of operations, MACs and parameters on
the Edge TPU, the on-chip cache estimate, and one concrete piece of advice per cause.
Pure functions over `tflite_model.Model`, like the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.compiler_output import suggest_imgsz
from edgeapp.core.edgetpu.ops import (
    EIGHT_BIT_TYPES,
    OP_HINTS,
    RESIZE_MAX_FACTOR,
    RESIZE_RECORDED_FACTOR,
    constant_reader,
    resize_factor,
)
from edgeapp.core.edgetpu.rules import OpJson, OpPrediction, predict
from edgeapp.core.edgetpu.specs import ON_CHIP_CACHE_BYTES, USABLE_CACHE_BYTES
from edgeapp.core.tflite.model import Tensor, TfliteModel
from edgeapp.core.units import format_bytes
from edgeapp.errors import EdgeappError

VERDICT_TEXT = {"fully_mapped": "fully mapped to the Edge TPU",
                "partially_mapped": "partially mapped (some operations run on the CPU)",
                "not_mapped": "not mapped (everything runs on the CPU)"}


class TensorDoc(TypedDict):
    """A model input or output as the report shows it (scale and zero point: None unquantized)."""
    name: str
    shape: List[int]
    dtype: str
    scale: Optional[float]
    zero_point: Optional[int]


class CpuOp(TypedDict):
    index: int
    op: str
    reason: Optional[str]


class DetectionHead(TypedDict):
    """The recognised detection decode left to the CPU: "ssd" or "yolo", its operators."""
    kind: str
    first_op: int
    ops: List[int]


class CheckSummary(TypedDict, total=False):
    """The `summary` of `check`'s report. `summarize` writes the prediction's keys;
    check_model adds the compiler's, flows/check the parameters' use (read from a compiled
    model, or predicted) and the CLI why that compiler version was chosen."""
    verdict: str  # fully_mapped, partially_mapped, not_mapped (VERDICT_TEXT)
    ops_total: int
    ops_tpu: int
    ops_cpu: int
    ops_tpu_share: float
    macs_total: int
    macs_tpu: int
    macs_tpu_share: Optional[float]
    parameter_bytes: int
    parameter_bytes_tpu: int
    on_chip_cache_bytes: int
    streamed_bytes_estimate: int
    first_cpu_op: Optional[int]
    cpu_ops: List[CpuOp]
    inputs: List[TensorDoc]
    outputs: List[TensorDoc]
    causes: List[str]
    blockers: List[str]
    already_compiled: bool
    warnings: List[str]
    advice: List[str]
    detection_head: Optional[DetectionHead]
    compiler_version: int
    runtime_needed: int
    compiler_version_why: str
    on_chip_bytes: Optional[int]
    off_chip_bytes: Optional[int]
    caching_tokens: List[str]
    parameters: str  # read, predicted or unknown


class CheckDoc(TypedDict):
    """`check --format json` of one model."""
    model: str
    ops: List[OpJson]
    summary: CheckSummary


@dataclass
class CheckResult:
    model: str
    ops: list[OpPrediction]
    summary: CheckSummary = field(default_factory=dict)

    @property
    def fully_mapped(self) -> bool:
        return self.summary["verdict"] == "fully_mapped"

    def to_json(self) -> CheckDoc:
        return {"model": self.model, "ops": [o.to_json() for o in self.ops], "summary": self.summary}


def check_model(model: TfliteModel, data: Optional[bytes] = None, compiler: int = 16) -> CheckResult:
    """Predict the Edge TPU mapping of `model` by compiler version `compiler` (14 or 16);
    `data` (the file's bytes) enables the rules that read constant operands (axes, paddings,
    strides, zero pads)."""
    read = constant_reader(data) if data is not None else None
    preds, blockers = predict(model, read, compiler)
    summary = summarize(model, preds, blockers)
    summary["compiler_version"] = compiler
    summary["runtime_needed"] = 14 if compiler >= 16 else 13
    return CheckResult(model=model.path, ops=preds, summary=summary)


def _io(t: Tensor) -> TensorDoc:
    q = t.quantization
    return {"name": t.name, "shape": list(t.shape_signature or t.shape), "dtype": t.dtype,
            "scale": q.per_tensor[0] if q else None, "zero_point": q.per_tensor[1] if q else None}


def summarize(model: TfliteModel, preds: list[OpPrediction], blockers: Sequence[str] = ()) -> CheckSummary:
    """The `summary` of the report: verdict, shares on the Edge TPU, warnings and advice."""
    n = len(preds)
    tpu = [p for p in preds if p.mapped]
    macs_total = sum(p.macs for p in preds)
    macs_tpu = sum(p.macs for p in tpu)
    if n and len(tpu) == n:
        verdict = "fully_mapped"
    elif tpu:
        verdict = "partially_mapped"
    else:
        verdict = "not_mapped"
    tpu_idx = {p.index for p in tpu}
    consumed: set[int] = set()
    for op in model.operators:
        if op.index in tpu_idx:
            consumed.update(t for t in op.inputs if t >= 0 and model.tensors[t].is_constant)
    params_tpu = sum(model.tensors[t].data_size for t in consumed)
    first_cpu = next((p.index for p in preds if not p.mapped), None)
    causes = list(dict.fromkeys(c for p in preds for c in p.causes))
    summary: CheckSummary = {
        "verdict": verdict,
        "ops_total": n,
        "ops_tpu": len(tpu),
        "ops_cpu": n - len(tpu),
        "ops_tpu_share": round(len(tpu) / n, 4) if n else 0.0,
        "macs_total": macs_total,
        "macs_tpu": macs_tpu,
        "macs_tpu_share": round(macs_tpu / macs_total, 4) if macs_total else None,
        "parameter_bytes": model.parameter_bytes,
        "parameter_bytes_tpu": params_tpu,
        "on_chip_cache_bytes": ON_CHIP_CACHE_BYTES,
        "streamed_bytes_estimate": max(0, params_tpu - ON_CHIP_CACHE_BYTES),
        "first_cpu_op": first_cpu,
        "cpu_ops": [{"index": p.index, "op": p.op, "reason": p.reason} for p in preds if not p.mapped],
        "inputs": [_io(t) for t in model.input_tensors],
        "outputs": [_io(t) for t in model.output_tensors],
        "causes": causes,
        "blockers": list(blockers),
        "already_compiled": model.is_edgetpu_compiled,
        "warnings": [],
        "advice": [],
    }
    summary["detection_head"] = detection_head(model, preds, summary)
    summary["warnings"] = _warnings(model, preds, summary)
    summary["advice"] = advise(model, preds, summary)
    return summary


def _mib(n: int) -> str:
    return format_bytes(n, "MiB")


def _warnings(model: TfliteModel, preds: list[OpPrediction], s: CheckSummary) -> list[str]:
    out = []
    if s["parameter_bytes_tpu"] > ON_CHIP_CACHE_BYTES:
        out.append(f"parameters on the Edge TPU: {_mib(s['parameter_bytes_tpu'])}, over the ~8 MiB "
                   f"on-chip cache: at least {_mib(s['streamed_bytes_estimate'])} will be streamed "
                   "from host memory on every inference (slower)")
    elif s["parameter_bytes_tpu"] > USABLE_CACHE_BYTES:
        out.append(f"parameters on the Edge TPU: {_mib(s['parameter_bytes_tpu'])}, close to the "
                   "~8 MiB on-chip cache (compiler 16 caches about 7 MiB): part of them may be "
                   "streamed from host memory on every inference")
    for p in preds:
        factor = resize_factor(model, model.operators[p.index]) if p.mapped else None
        if factor is not None and RESIZE_RECORDED_FACTOR < factor <= RESIZE_MAX_FACTOR:
            out.append(f"op {p.index} {p.op} upscales x{factor:.3g}: predicted on the Edge TPU, "
                       f"but compiler 16 is recorded mapping x{RESIZE_RECORDED_FACTOR:g} and "
                       "refusing larger factors to avoid a loss of precision; it may run on the CPU")
    if s["already_compiled"]:
        out.append("this model is already compiled for the Edge TPU (edgetpu-custom-op); check "
                   "its CPU twin (X.tflite) to predict a compilation")
    return out


# The CPU part of a detection model is its head's decode when it does at most this share of the
# model's MACs (Ultralytics' YOLO exports: 0.04%; a large imgsz that leaves backbone layers on
# the CPU: far more, and the generic advice then applies).
HEAD_MAC_SHARE = 0.01
SSD_POSTPROCESS = "TFLite_Detection_PostProcess"


def detection_head(model: TfliteModel, preds: list[OpPrediction], s: CheckSummary) -> Optional[DetectionHead]:
    """The CPU part after the Edge TPU when it is a recognised detection head's decode, else None.

    Recognised: a YOLO export (its output layout, core/vision/yolo) or an SSD (the
    TFLite_Detection_PostProcess operator on the CPU), whose CPU operators after the Edge TPU
    part do almost none of the work (HEAD_MAC_SHARE). That part is what every
    such export leaves to the CPU on purpose (box decode, softmax over DFL bins, transposes,
    NMS): advice about its operators one by one (a TRANSPOSE, a Softmax, the cut) is advice the
    user cannot act on, so `advise` leaves it out and says what the part is, once."""
    cpu = [p for p in preds if not p.mapped and p.after_tpu]  # before the TPU: their own advice
    if not cpu or not any(p.mapped for p in preds):
        return None
    total = s["macs_total"] or 0
    if total and sum(p.macs for p in cpu) / total > HEAD_MAC_SHARE:
        return None
    if any(p.op == SSD_POSTPROCESS for p in cpu):
        kind = "ssd"
    elif _yolo_layout(model) is not None:
        kind = "yolo"
    else:
        return None
    return {"kind": kind, "first_op": cpu[0].index, "ops": [p.index for p in cpu]}


def advise(model: TfliteModel, preds: list[OpPrediction], s: CheckSummary) -> list[str]:
    """One concrete piece of advice per cause found, the model-wide fixes first; the operators of
    a recognised detection head are said to be that, once, instead of one tip each."""
    head = s.get("detection_head")
    if head:
        own = set(head["ops"])
        preds = [p for p in preds if p.index not in own]
    causes = list(dict.fromkeys(c for p in preds for c in p.causes))
    tips = [f"the compiler will refuse this model: {b}" for b in s["blockers"]]
    tips += _type_advice(model, preds, causes)
    tips += _shape_advice(model, causes)
    tips += _operator_advice(preds)
    tips += _limit_advice(preds)
    tips += _cut_advice(preds)
    if "precision" in causes:
        tips.append("resize upscaling too much for the Edge TPU's precision: upscale in steps of "
                    f"at most x{RESIZE_MAX_FACTOR:g}, or leave the final upscale out of the model "
                    "and do it on the CPU")
    task_tip = (_ssd_advice(head) if head and head["kind"] == "ssd" else None) \
        or _yolo_advice(model, s) or _segmentation_advice(model, preds)
    if task_tip:
        tips.insert(len(s["blockers"]), task_tip)
    if s["streamed_bytes_estimate"] > 0:
        tips.append("too many parameters for the on-chip cache: use a smaller model, or "
                    "`edgeapp compile --segments N` to pipeline it over N Edge TPUs")
    return tips


def _type_advice(model: TfliteModel, preds: list[OpPrediction], causes: list[str]) -> list[str]:
    """Float, other non-8-bit and batched tensors: fixed by converting again."""
    tips = []
    if "float" in causes:
        tips.append("float tensors: re-run `edgeapp convert` with full-integer quantization "
                    "(every weight and activation int8)")
    if "float_io" in causes:
        tips.append("float input/output: re-run `edgeapp convert --io uint8` (or int8) so the "
                    "(de)quantization is not left on the CPU")
    explained = EIGHT_BIT_TYPES + ("float32", "float16", "float64", "int32", "int64")
    kinds = sorted({t.dtype for p in preds if "dtype" in p.causes for t in _op_tensors(model, p.index)
                    if t.dtype not in explained})
    if kinds:  # int32 activations come from shape arithmetic: see the dynamic-size advice
        tips.append(f"{'/'.join(kinds)} tensors: the Edge TPU runs 8-bit quantization only "
                    "(re-convert with int8, not 16x8, quantization)")
    batches = sorted({t.shape[0] for p in preds if "batch" in p.causes
                      for t in _op_tensors(model, p.index) if len(t.shape) == 4 and t.shape[0] > 1})
    if batches:
        tips.append(f"batch is {batches[0]}: re-convert with batch 1")
    return tips


def _shape_advice(model: TfliteModel, causes: list[str]) -> list[str]:
    """Dynamic sizes and too many dimensions."""
    tips = []
    if any(t.has_dynamic_batch for t in model.input_tensors):
        tips.append("dynamic batch (-1): re-convert with a fixed batch of 1 (`edgeapp convert` "
                    "does)")
    elif "dynamic" in causes:
        tips.append("dynamic-sized tensors: give every shape operand a constant value (fixed "
                    "batch 1 and fixed input size)")
    if "rank" in causes:
        tips.append("tensors with more than 3 dimensions larger than 1: reshape them to at most "
                    "3 (e.g. fold dimensions together)")
    return tips


def _operator_advice(preds: list[OpPrediction]) -> list[str]:
    """What to use instead of each unsupported operator, once per operator."""
    tips = []
    for name in dict.fromkeys(p.op for p in preds if "unsupported_op" in p.causes):
        hint = OP_HINTS.get(name, "replace it with supported operations (g.co/coral/model-reqs), "
                                  "or move it to the end of the model")
        tips.append(f"{name} is not supported: {hint}")
    return tips


def _limit_advice(preds: list[OpPrediction]) -> list[str]:
    """The common limits once (fused pooling activation, Softmax), every other one per op."""
    tips = []
    limits = [p for p in preds if "limit" in p.causes]
    if any("pooling" in (p.reason or "") for p in limits):
        tips.append("fused activation on pooling: apply the activation as its own layer, or "
                    "before the pooling (ReLU then max-pool gives the same result)")
    if any(p.op == "SOFTMAX" for p in limits):
        tips.append("Softmax on a multi-dimensional tensor: flatten before it, or apply it on "
                    "the CPU after the model")
    for p in limits:
        texts = [t for c, t in p.problems if c == "limit"]
        if p.causes == ("limit",) and "pooling" not in texts[0] and p.op != "SOFTMAX":
            tips.append(f"op {p.index} {p.op}: {'; '.join(texts)}")
    return tips


def _cut_advice(preds: list[OpPrediction]) -> list[str]:
    """The CPU operator that cuts the Edge TPU subgraph, when supported operators follow it."""
    after = [p for p in preds if p.after_tpu and p.causes != ("depends_on_cpu",)]
    if not (after and any("depends_on_cpu" in p.causes for p in preds)):
        return []
    first = after[0]
    n_dep = sum(1 for p in preds if "depends_on_cpu" in p.causes)
    return [f"op {first.index} ({first.op}) cuts the Edge TPU subgraph: {n_dep} supported "
            "operation(s) after it also run on the CPU; fix it or move it to the end of "
            "the model"]


def _yolo_layout(model: TfliteModel):
    """The YOLO output layout of `model` (core/vision/yolo), or None when it is no YOLO export."""
    from edgeapp.core.vision.yolo import find_yolo_layout

    shape = model.input_tensors[0].shape if len(model.input_tensors) == 1 else ()
    if len(shape) != 4:
        return None
    try:
        return find_yolo_layout([t.shape for t in model.output_tensors], (shape[2], shape[1]))
    except EdgeappError:
        return None


def _yolo_advice(model: TfliteModel, s: dict) -> Optional[str]:
    """For a YOLO export: whether its CPU part is the detection head's decode (then nothing is to
    be done about it), or more, when a smaller imgsz would map more (the first CPU op early in
    the graph, MACs off the TPU)."""
    layout = _yolo_layout(model)
    if layout is None:
        return None
    shape = model.input_tensors[0].shape
    what = (f"a YOLO export ({layout.kind} layout {layout.how}: {layout.classes} classes, "
            f"{layout.anchors} anchors at {shape[2]}x{shape[1]}): run it with `edgeapp detect`, "
            "which decodes and NMS's on the CPU as Ultralytics does")
    cpu = [c for c in s["cpu_ops"]]
    if not cpu:
        return what + "; it maps fully"
    first, total = cpu[0], s["macs_total"] or 0
    share = s["macs_tpu"] / total if total else 0.0
    tip = (f"{what}; from op {first['index']} ({first['op']}) on, {len(cpu)} op(s) run on the CPU, "
           f"{1 - share:.2%} of the MACs")
    if s.get("detection_head"):
        return (tip + ": the head's box decode, as in Ultralytics' own Edge TPU exports (nothing to "
                "change: the backbone and neck map, and those ops' CPU reasons are by design)")
    smaller = suggest_imgsz(max(shape[1], shape[2]), s["ops_tpu"], s["ops_total"])
    if smaller is not None:
        return (tip + f": more than the head's decode; export again with a smaller imgsz (e.g. "
                f"{smaller}): larger inputs need activations beyond the on-chip memory")
    return tip + ": more than the head's decode"


def _ssd_advice(head: dict) -> str:
    """For an SSD: its post-processing on the CPU is Coral's own design."""
    return (f"an SSD detector: from op {head['first_op']} on, {len(head['ops'])} op(s) run on the "
            f"CPU, its {SSD_POSTPROCESS} (box decode and NMS), as in Coral's own SSD models "
            "(nothing to change); run it with `edgeapp detect`")


def _segmentation_advice(model: TfliteModel, preds: list[OpPrediction]) -> Optional[str]:
    """For a segmentation model: what to leave to `edgeapp segment` (the argmax and the final
    upscale to the image size run there, on the CPU)."""
    from edgeapp.core.vision.segmentation import is_segmentation_output

    shapes = [t.shape for t in model.output_tensors]
    if len(shapes) != 1 or not is_segmentation_output(shapes[0]):
        return None
    tail = [p for p in preds if not p.mapped and p.op in ("ARG_MAX", "RESIZE_BILINEAR",
                                                          "RESIZE_NEAREST_NEIGHBOR")]
    out = list(shapes[0])
    if not tail:
        return (f"output {out} looks like segmentation: run the model with `edgeapp segment`, "
                "which takes the argmax of class scores on the CPU and maps the class map back "
                "to each image's size")
    names = list(dict.fromkeys(p.op for p in tail))
    ops = " and ".join(names) + (" run" if len(names) > 1 else " runs")
    return (f"segmentation model (output {out}): {ops} on the CPU; end the model at the class scores "
            "[1, H, W, C] (before the final upscale and ARG_MAX) and run it with `edgeapp "
            "segment`, which takes the argmax on the CPU and maps the class map back to each "
            "image's size")


def _op_tensors(model: TfliteModel, index: int) -> list[Tensor]:
    op = model.operators[index]
    return [model.tensors[t] for t in op.inputs + op.outputs if t >= 0]
