#!/usr/bin/env python3
"""Where should a YOLO export's int8 stop? Layout variants of one Ultralytics ONNX export,
quantized the same way, scored by COCO mAP on a labelled held-out set, and mapped by `check`.

Variants (all calibrated on the same photos, letterboxed as `detect` letterboxes them, with
edgeapp's quantization; the score of each is pycocotools' mAP50-95 / mAP50 on the held-out
images, detections decoded and NMS'd by core/vision/yolo.py with Ultralytics' val settings: conf
0.001, IoU 0.7, 300 boxes):
  * float: the ONNX file on ONNX Runtime;
  * split: what `edgeapp convert` writes: the graph cut before the decode, two int8 outputs
    (DFL box logits (1, N, 64), class logits (1, N, nc)), the decode on the CPU in float;
  * separate: the decode kept in the int8 graph, boxes normalized to 0..1 and class scores
    as two outputs (1, 4, N) + (1, nc, N), each with its own scale;
  * normalized: the decode in the graph and one output (1, 4 + nc, N), boxes normalized to
    0..1 so that they and the 0..1 scores share one scale (what Ultralytics' TFLite export does,
    though it normalizes before the decode's last multiplication);
  * pixels: the export as it is, through the generic converter: pixel boxes and 0..1 scores
    in one output, one scale;
  * ultralytics: Ultralytics' own full-integer export of the same checkpoint (--ultralytics).
`split` is made by `edgeapp convert` itself, timed per step with --report (2 cores, `nice`).

    python scripts/bench_yolo_convert.py tests/fixtures/yolo_onnx/yolov8_shapes.onnx \\
        --calibration tests/fixtures/yolo_onnx/shapes_calib --val tests/fixtures/yolo_onnx/shapes_val \\
        --ultralytics tests/fixtures/yolo_onnx/yolov8_shapes_full_integer_quant.tflite --out /tmp/yolo-bench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgeapp.core.vision import yolo  # noqa: E402
from edgeapp.core.vision.boxes import to_original_array  # noqa: E402
from edgeapp.core.vision.classify import dequantize  # noqa: E402

EVAL_CONF = 0.001


# ----------------------------------------------------------------------------- variants


def decode_end(model, size: tuple, separate: bool, normalized: bool = True):
    """The export with its boxes (the final Concat's first input) normalized to 0..1, as one
    output or as boxes + scores."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    out = g.output[0].name
    last = next(n for n in g.node if out in n.output)
    assert last.op_type == "Concat", last
    boxes, scores = last.input[0], last.input[1]
    w, h = size
    scale = np.array([1 / w, 1 / h, 1 / w, 1 / h], np.float32).reshape(1, 4, 1)
    g.initializer.append(numpy_helper.from_array(scale, "bench/norm"))
    g.node.append(helper.make_node("Mul", [boxes, "bench/norm"], ["bench/boxes"], name="bench/boxes"))
    if separate:
        g.node.remove(last)
        nc = g.output[0].type.tensor_type.shape.dim[1].dim_value - 4
        n = g.output[0].type.tensor_type.shape.dim[2].dim_value
        del g.output[:]
        g.output.extend([helper.make_tensor_value_info("bench/boxes", 1, [1, 4, n]),
                         helper.make_tensor_value_info(scores, 1, [1, nc, n])])
    else:
        last.input[0] = "bench/boxes"
    return m


def normalize_early(model, size: tuple):
    """The export with Ultralytics' TFLite normalization: distances and anchors scaled by
    stride / input size before the decode (so every tensor of it is in 0..1), the final
    multiplication by the strides dropped; one output (1, 4 + nc, N) of normalized boxes."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    produced = {o: n for n in g.node for o in n.output}
    last = produced[g.output[0].name]
    mul = produced[last.input[0]]
    assert mul.op_type == "Mul", mul
    joined, strides = (mul.input[0], mul.input[1]) if mul.input[0] in produced and produced[
        mul.input[0]].op_type == "Concat" else (mul.input[1], mul.input[0])
    steps = _const(g, produced, strides).reshape(-1)
    sliced = {n.output[0]: n for n in g.node if n.op_type == "Slice"}
    users = [n for n in g.node if n.op_type in ("Sub", "Add") and n.input[1] in sliced]  # anchor -/+ distance
    dist = sliced[users[0].input[1]].input[0]
    w, h = size
    per_side = np.stack([steps / w, steps / h, steps / w, steps / h])[None].astype(np.float32)  # (1, 4, N)
    g.initializer.append(numpy_helper.from_array(per_side, "bench/norm"))
    for k, n in enumerate(users):
        anchors = _const(g, produced, n.input[0]) * per_side[:, :2]
        g.initializer.append(numpy_helper.from_array(anchors.astype(np.float32), f"bench/anchors_{k}"))
        n.input[0] = f"bench/anchors_{k}"
    for n in sliced.values():
        if n.input[0] == dist:
            n.input[0] = "bench/dist"
    g.node.append(helper.make_node("Mul", [dist, "bench/norm"], ["bench/dist"], name="bench/dist"))
    last.input[0] = joined
    g.node.remove(mul)
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(_toposort(nodes, {i.name for i in g.input} | {i.name for i in g.initializer}))
    onnx.checker.check_model(m)
    return m


def _const(g, produced: dict, name: str) -> np.ndarray:
    from onnx import numpy_helper

    for i in g.initializer:
        if i.name == name:
            return numpy_helper.to_array(i).astype(np.float32)
    node = produced[name]
    return numpy_helper.to_array(node.attribute[0].t).astype(np.float32)


def _toposort(nodes: list, ready: set) -> list:
    out, ready, todo = [], set(ready), list(nodes)
    while todo:
        rest = []
        for n in todo:
            if all(i in ready or not i for i in n.input):
                out.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(todo):
            raise ValueError("graph has a cycle")
        todo = rest
    return out


def quantize_variant(model, out: Path, calibration: Path, size: tuple, samples: int) -> Path:
    """edgeapp's own steps (letterboxed calibration, onnx2tf, the int8 quantization) on `model`."""
    from edgeapp.flows.convert.data import find_sources, load_dataset, normalize, split_held_out
    from edgeapp.flows.convert.detection import letterboxer
    from edgeapp.flows.convert.onnx import load_onnx
    from edgeapp.flows.convert.onnx_graph import image_input
    from edgeapp.flows.convert.quantize import exported, quantize

    found, _ = split_held_out(find_sources(calibration, "--calibration"), samples, 50)
    inp = image_input(model, None, out)
    cal = load_dataset(found, size, 3, samples, fit=letterboxer(size))
    x = normalize(cal, 0.0, 255.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    fm = load_onnx(model, inp, x, out.with_suffix(".log"))
    try:
        with exported(fm) as saved:
            quantize(saved, x, out)
    finally:
        fm.close()
    return out


# ----------------------------------------------------------------------------- running


def float_runner(path: Path):
    import onnxruntime as ort

    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name

    def run(pixels: np.ndarray) -> tuple:
        x = (pixels.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
        return [s.run(None, {name: x})[0]], [(0.0, 0)]

    return run


def tflite_runner(path: Path):
    from edgeapp.core.vision.preprocess import quantize_input
    from edgeapp.hw.runtime import open_engine

    e = open_engine(path, "cpu")
    scale, zero = e.input_quantization
    quant = yolo.output_quantizations(e)

    def run(pixels: np.ndarray) -> tuple:
        return e.run(quantize_input(pixels, e.input_dtype, scale, zero, 0.0, 255.0)[None]), quant

    return run


def candidates(kind: str, outputs: list, quant: list, size: tuple, nc: int):
    """Decoded candidates in input pixels for each variant's outputs."""
    w, h = size
    if kind == "split":
        layout = yolo.sidecar_layout({"layout": "dfl", "boxes": 0, "scores": 1},
                                     [o.shape for o in outputs], size)
        return yolo.decode(outputs, quant, layout, size, EVAL_CONF)
    real = [dequantize(np.asarray(o), float(q[0]), int(q[1])) for o, q in zip(outputs, quant)]
    if kind == "separate":
        by_width = sorted(real, key=lambda a: a.shape[1] != 4)
        rows = np.concatenate([a.reshape(a.shape[-2:]) for a in by_width], axis=0)
    else:
        rows = real[0].reshape(real[0].shape[-2:]).copy()
        if rows.shape[0] > rows.shape[1]:
            rows = rows.T  # (N, 4 + nc)
        if kind in ("float", "pixels"):
            rows[:4] /= np.array([w, h, w, h], np.float32)[:, None]
    layout = yolo.find_yolo_layout([(1,) + rows.shape], size, "yolov8")
    return yolo.decode([rows[None]], [(0.0, 0)], layout, size, EVAL_CONF)


def evaluate(kind: str, run, val: Path, size: tuple, names: dict) -> dict:
    """COCO mAP on the held-out set (instances_val.json; categories matched by name)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from edgeapp.core.vision.preprocess import load_image

    gt = COCO(str(val / "instances_val.json"))
    by_name = {c["name"]: c["id"] for c in gt.dataset["categories"]}
    results = []
    for image in gt.dataset["images"]:
        pixels = np.asarray(load_image(str(val / image["file_name"]), 3), dtype=np.uint8)
        boxed, fit = yolo.letterbox(pixels, size)
        outputs, quant = run(boxed)
        found = candidates(kind, outputs, quant, size, len(names))
        keep = yolo.nms(found.boxes, found.scores, found.classes, yolo.IOU, yolo.MAX_DET)
        for b, s, c in zip(to_original_array(found.boxes[keep], fit), found.scores[keep], found.classes[keep]):
            results.append({"image_id": image["id"], "category_id": by_name[names[int(c)]], "score": float(s),
                            "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]})
    if not results:  # pycocotools cannot load an empty list: nothing found is mAP 0
        return {"map50_95": 0.0, "map50": 0.0}
    ev = COCOeval(gt, gt.loadRes(results), "bbox")
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return {"map50_95": round(float(ev.stats[0]), 4), "map50": round(float(ev.stats[1]), 4)}


def check(path: Path) -> dict:
    from edgeapp.flows.check import check_file

    s = check_file(path).summary
    return {k: s[k] for k in ("ops_tpu", "ops_total", "macs_tpu_share")}


def edgeapp_convert(onnx_file: Path, out: Path, calibration: Path) -> dict:
    """`edgeapp convert --report` as a user runs it: its per-step times and its report."""
    start = time.perf_counter()
    proc = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "edgeapp", "convert", str(onnx_file),
                           "-o", str(out), "-c", str(calibration), "--report", "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    report = json.loads(proc.stdout)
    report["wall_s"] = round(time.perf_counter() - start, 1)
    return report


def main() -> None:
    import onnx

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("onnx", type=Path)
    ap.add_argument("--calibration", type=Path, required=True)
    ap.add_argument("--val", type=Path, required=True, help="held-out set with instances_val.json")
    ap.add_argument("--ultralytics", type=Path, help="Ultralytics' full-integer .tflite of the same checkpoint")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--variants", nargs="*", default=["float", "split", "separate", "normalized", "early",
                                                      "pixels", "ultralytics"])
    a = ap.parse_args()
    from edgeapp.flows.convert.yolo_onnx import find_head, metadata

    model = onnx.load(str(a.onnx))
    names = find_head(model, a.onnx).names
    imgsz = metadata(model).get("imgsz") or [256, 256]
    size = (int(imgsz[1]), int(imgsz[0]))
    rows = {}
    for kind in a.variants:
        path, extra = None, {}
        if kind == "float":
            run = float_runner(a.onnx)
        elif kind == "split":
            path = a.out / f"{a.onnx.stem}_split.tflite"
            report = edgeapp_convert(a.onnx, path, a.calibration)
            extra = {"times_s": report["times_s"], "wall_s": report["wall_s"],
                     "agreement": report["agreement_detail"].get("detection")}
        elif kind == "ultralytics":
            if a.ultralytics is None:
                continue
            path = a.ultralytics
        else:
            path = a.out / f"{a.onnx.stem}_{kind}.tflite"
            variant = (model if kind == "pixels" else normalize_early(model, size) if kind == "early"
                       else decode_end(model, size, kind == "separate"))
            quantize_variant(variant, path, a.calibration, size, a.samples)
        if path is not None:
            run = tflite_runner(path)
            extra["check"] = check(path)
        decoder = "normalized" if kind in ("ultralytics", "early") else kind
        rows[kind] = {**evaluate(decoder, run, a.val, size, names), **extra}
        print(kind, json.dumps(rows[kind]), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"{a.onnx.stem}_bench.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
