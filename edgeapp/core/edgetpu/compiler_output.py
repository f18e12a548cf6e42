"""What `edgetpu_compiler` prints, parsed and judged: pure functions over its text.

`parse_stdout` turns the compiler's free text into a `CompileResult`; `judge` decides by the
parsed counts, not by the exit status (undocumented: compiler 16 can print "succeeded" and
map nothing). Running the compiler is `compiler.py`'s job.

Recorded formats (compiler 14-16) are in tests/fixtures/compiler/.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence

from typing_extensions import TypedDict

from edgeapp.core.edgetpu.rules import VERSION_WORKAROUND
from edgeapp.core.units import format_bytes
from edgeapp.errors import ExitCode

MAPPED_STATUS = "Mapped to Edge TPU"

_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "KB": 1000, "MB": 1000 ** 2,
          "GB": 1000 ** 3}


# ----------------------------------------------------------------------------- parsing


@dataclass
class OperatorStatus:
    operator: str
    count: int
    status: str

    @property
    def mapped(self) -> bool:
        return self.status == MAPPED_STATUS


@dataclass
class Failure:
    kind: str  # not_quantized, op_version, internal_error, timeout, dynamic_tensors, ...
    message: str  # the compiler's line
    fix: str  # one line: what to do

    def explain(self) -> str:
        return f"{self.message} — {self.fix}"


class OperatorJson(TypedDict):
    operator: str
    count: int
    status: str
    mapped: bool


class FailureJson(TypedDict):
    kind: str
    message: str
    fix: str


class CompileJson(TypedDict):
    """What edgetpu_compiler's output said (CompileResult's fields), one per segment too."""
    compiler_version: Optional[str]
    timeout_s: Optional[int]
    compile_ms: Optional[int]
    input_model: Optional[str]
    input_size_bytes: Optional[int]
    output_model: Optional[str]
    output_size_bytes: Optional[int]
    on_chip_used_bytes: Optional[int]
    on_chip_remaining_bytes: Optional[int]
    off_chip_bytes: Optional[int]
    subgraphs: Optional[int]
    total_ops: Optional[int]
    ops_tpu: Optional[int]
    ops_cpu: Optional[int]
    operation_log: Optional[str]
    compiled: bool
    succeeded: Optional[bool]
    partial_notice: bool
    operators: List[OperatorJson]
    failures: List[FailureJson]
    segments: List["CompileJson"]


@dataclass
class CompileResult:
    compiler_version: Optional[str] = None
    timeout_s: Optional[int] = None
    compile_ms: Optional[int] = None
    input_model: Optional[str] = None
    input_size_bytes: Optional[int] = None
    output_model: Optional[str] = None
    output_size_bytes: Optional[int] = None
    on_chip_used_bytes: Optional[int] = None
    on_chip_remaining_bytes: Optional[int] = None
    off_chip_bytes: Optional[int] = None
    subgraphs: Optional[int] = None
    total_ops: Optional[int] = None
    ops_tpu: Optional[int] = None
    ops_cpu: Optional[int] = None
    operation_log: Optional[str] = None
    compiled: bool = False  # "Model compiled successfully"
    succeeded: Optional[bool] = None  # "Compilation succeeded!" / "Compilation failed!"
    partial_notice: bool = False  # "not all operations are supported"
    operators: list[OperatorStatus] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    segments: list["CompileResult"] = field(default_factory=list)  # one per "Input model:" block

    def to_json(self) -> CompileJson:
        d = asdict(self)
        d["operators"] = [{**asdict(o), "mapped": o.mapped} for o in self.operators]
        d["segments"] = [s.to_json() for s in self.segments]
        return d

    @property
    def cpu_operators(self) -> list[OperatorStatus]:
        return [o for o in self.operators if not o.mapped]


def parse_size(text: str) -> Optional[int]:
    """'4.24MiB' -> bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMG]i?B|B)\s*", text)
    if not m:
        return None
    return int(round(float(m.group(1)) * _UNITS[m.group(2)]))


_FIELDS = [
    (re.compile(r"^Edge TPU Compiler version (\S+)"), "compiler_version", str),
    (re.compile(r"^Started a compilation timeout timer of (\d+) seconds"), "timeout_s", int),
    (re.compile(r"^Model compiled successfully in (\d+) ms"), "compile_ms", int),
    (re.compile(r"^Input model: (.+)$"), "input_model", str),
    (re.compile(r"^Input size: (.+)$"), "input_size_bytes", parse_size),
    (re.compile(r"^Output model: (.+)$"), "output_model", str),
    (re.compile(r"^Output size: (.+)$"), "output_size_bytes", parse_size),
    (re.compile(r"^On-chip memory used for caching model parameters: (.+)$"), "on_chip_used_bytes", parse_size),
    (re.compile(r"^On-chip memory remaining for caching model parameters: (.+)$"), "on_chip_remaining_bytes",
     parse_size),
    (re.compile(r"^Off-chip memory used for streaming uncached model parameters: (.+)$"), "off_chip_bytes", parse_size),
    (re.compile(r"^Number of Edge TPU subgraphs: (\d+)"), "subgraphs", int),
    (re.compile(r"^Total number of operations: (\d+)"), "total_ops", int),
    (re.compile(r"^Operation log: (.+)$"), "operation_log", str),
    (re.compile(r"^Number of operations that will run on Edge TPU: (\d+)"), "ops_tpu", int),
    (re.compile(r"^Number of operations that will run on CPU: (\d+)"), "ops_cpu", int),
]
_PER_MODEL = {"input_model", "input_size_bytes", "output_model", "output_size_bytes",
              "on_chip_used_bytes", "on_chip_remaining_bytes", "off_chip_bytes", "subgraphs",
              "total_ops", "operation_log", "ops_tpu", "ops_cpu", "compile_ms"}
_TABLE_HEADER = re.compile(r"^Operator\s+Count\s+Status\s*$")
_TABLE_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\S.*?)\s*$")


def parse_operator_table(text: str) -> list[OperatorStatus]:
    """Rows of every `Operator  Count  Status` table in `text` (the .log, or stdout with -s)."""
    rows: list[OperatorStatus] = []
    in_table = False
    for line in text.splitlines():
        line = line.strip()
        if _TABLE_HEADER.match(line):
            in_table = True
        elif in_table and line:
            m = _TABLE_ROW.match(line)
            if m:
                rows.append(OperatorStatus(m.group(1), int(m.group(2)), m.group(3)))
            else:  # the table ended
                in_table = False
    return rows


def parse_stdout(text: str) -> CompileResult:
    """Everything the compiler's stdout (+stderr) says, as a `CompileResult`.

    Each compiled model gets a block of lines (from "Model compiled successfully" or "Input
    model:"); with --num_segments there is one block per segment, and with several models
    (co-compiled: "Models compiled successfully") one per model, in the order given: the
    top-level fields then hold the sums and `segments` the blocks. With --search_delegate the last attempt counts.
    """
    result = CompileResult()
    blocks: list[CompileResult] = []
    current: Optional[CompileResult] = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("Model compiled successfully", "Models compiled successfully")):
            result.compiled = True
            current = CompileResult()
            blocks.append(current)
        current = _read_field(line, result, current, blocks)
        _read_status(line, result, current)
    result.failures = recognise_failures(text)
    if result.failures and result.succeeded is None and not result.compiled:
        result.succeeded = False
    result.operators = parse_operator_table(text)
    blocks = [b for b in blocks if b.input_model or b.total_ops is not None]
    if len(blocks) == 1:
        _merge(result, blocks[0])
    elif blocks:
        result.segments = blocks
        _merge(result, blocks[-1])
        for name in ("input_size_bytes", "output_size_bytes", "on_chip_used_bytes",
                     "off_chip_bytes", "subgraphs", "total_ops", "ops_tpu", "ops_cpu", "compile_ms"):
            values = [getattr(b, name) for b in blocks]
            setattr(result, name, sum(values) if all(v is not None for v in values) else None)
        result.input_model = blocks[0].input_model
    for b in result.segments:
        _derive_counts(b)
    _derive_counts(result)
    return result


def _read_field(line: str, result: CompileResult, current: Optional[CompileResult],
                blocks: list) -> Optional[CompileResult]:
    """One `Name: value` line into the result, or into the current model's block (a new block
    when a second "Input model:" starts one); returns the current block."""
    for pattern, name, conv in _FIELDS:
        m = pattern.match(line)
        if not m:
            continue
        if name in _PER_MODEL:
            if current is None or (name == "input_model" and current.input_model is not None):
                current = CompileResult()
                blocks.append(current)
            setattr(current, name, conv(m.group(1).strip()))
        else:
            setattr(result, name, conv(m.group(1).strip()))
        break
    return current


def _read_status(line: str, result: CompileResult, current: Optional[CompileResult]) -> None:
    if line.startswith("Compilation succeeded"):
        result.succeeded = True
    elif line.startswith("Compilation failed!"):
        result.succeeded = False
    elif "not all operations are supported by the Edge TPU" in line:
        result.partial_notice = True
        if current is not None:
            current.partial_notice = True


def _merge(into: CompileResult, block: CompileResult) -> None:
    for name in _PER_MODEL | {"partial_notice"}:
        value = getattr(block, name)
        if value is not None and value is not False:
            setattr(into, name, value)


def _derive_counts(r: CompileResult) -> None:
    """Compiler 16 prints the TPU/CPU counts only for a partial mapping; derive the rest from
    the operator table, or from the total when nothing says part of it runs on the CPU."""
    if r.ops_tpu is None:
        if r.operators:
            r.ops_tpu = sum(o.count for o in r.operators if o.mapped)
            if r.ops_cpu is None and r.total_ops is None:
                r.ops_cpu = sum(o.count for o in r.operators if not o.mapped)
        elif r.subgraphs == 0:
            r.ops_tpu = 0
        elif r.total_ops is not None and r.subgraphs is not None and not r.partial_notice:
            r.ops_tpu = r.total_ops
    if r.ops_cpu is None and r.ops_tpu is not None and r.total_ops is not None:
        r.ops_cpu = r.total_ops - r.ops_tpu


def apply_log(result: CompileResult, log_text: str) -> None:
    """Complete `result` with the operator table of the .log file (when stdout had none)."""
    rows = parse_operator_table(log_text)
    if rows and not result.operators:
        result.operators = rows
        if result.ops_tpu is None:
            _derive_counts(result)


# ----------------------------------------------------------------------------- failures


LARGE_ACTIVATIONS_FIX = ("the activations do not fit the Edge TPU's on-chip memory: reduce the "
                         "input size (a YOLO export: a smaller imgsz, see --help), compile with "
                         "--search-delegate (as Ultralytics does) to map a shorter first part, "
                         "or split with --segments N")
SUBGRAPH_CUT = "More than one subgraph is not supported"
UNSPECIFIED = "not mapped due to some unspecified limitation"
_OPCODE = re.compile(r"Didn't find op for builtin opcode '(\w+)' version '(\d+)'")


def recognise_failures(text: str) -> list[Failure]:
    """The known failure lines in the compiler's output, each explained with its fix."""
    found: list[Failure] = []
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        m = _OPCODE.search(line)
        if m:
            op, version = m.group(1), m.group(2)
            fix = VERSION_WORKAROUND.get(op, "convert with an older TensorFlow, or replace that "
                                             "layer")
            found.append(Failure("op_version", _after(line, "ERROR: "),
                                 f"the converter wrote {op} version {version}, newer than this "
                                 f"compiler knows: {fix}"))
        elif line.startswith("Model not quantized"):
            found.append(Failure("not_quantized", _with_previous(lines, i, "Invalid model:"),
                                 "the model is not fully 8-bit: re-run `edgeapp convert` "
                                 "(full-integer int8 quantization)"))
        elif line.startswith("Internal compiler error"):
            found.append(Failure("internal_error", line,
                                 "the compiler crashed on this graph: retry with "
                                 "--search-delegate, a lower --min-runtime, or --segments N; "
                                 "`edgeapp check` shows the operators it may choke on"))
        elif line.startswith("Compilation timeout"):
            found.append(Failure("timeout", line, "raise --timeout, use a smaller input size (a "
                                                  "YOLO export: a smaller imgsz), or split the "
                                                  "model with --segments N (large activations)"))
        elif "static-sized tensors" in line and "dynamic-sized" in line:
            found.append(Failure("dynamic_tensors", _after(line, "ERROR: "),
                                 "re-convert with a fixed batch of 1 (`edgeapp convert` does) "
                                 "so no tensor size is computed at run time"))
        elif "large activation tensors" in line:
            found.append(Failure("large_activations", line, LARGE_ACTIVATIONS_FIX))
        elif line.startswith("Model could not be parsed") and not any(
                f.kind == "op_version" for f in found):
            found.append(Failure("unparsable", _with_previous(lines, i, "Invalid model:"),
                                 "the compiler cannot read this TFLite file: check it with "
                                 "`edgeapp check`, re-convert with `edgeapp convert`"))
        elif "Segmentation fault" in line or "terminating with uncaught exception" in line:
            found.append(Failure("crash", line, "the compiler crashed: retry with "
                                                "--search-delegate or --segments N"))
    return found


def _with_previous(lines: list[str], i: int, prefix: str) -> str:
    j = i - 1
    while j >= 0 and not lines[j]:
        j -= 1
    return f"{lines[j]} / {lines[i]}" if j >= 0 and lines[j].startswith(prefix) else lines[i]


def timeout_failure(seconds: float) -> Failure:
    return Failure("timeout", f"compilation did not finish within {seconds:g} s (killed)",
                   "raise --timeout, or split the model with --segments N")


# ----------------------------------------------------------------------------- judging


@dataclass
class Judgement:
    verdict: str  # fully_mapped, partially_mapped, not_mapped, failed
    exit_code: int
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def judge(result: CompileResult, returncode: Optional[int] = 0,
          missing_outputs: Sequence[str] = (), printed: bool = True) -> Judgement:
    """Decide from the parsed counts: 0 subgraphs or 0 mapped operations fail even when the
    compiler says it succeeded; partial mapping and streamed parameters are warnings.
    `printed`: whether the compiler wrote anything at all (else no "last lines" to point at)."""
    errors: list[str] = [f.explain() for f in result.failures]
    warnings: list[str] = []
    if result.compiled and result.succeeded is not False and returncode in (0, None):
        # --search_delegate: earlier attempts failed, the last one compiled
        warnings = [f"an attempt failed before the model compiled: {e}" for e in errors]
        errors = []
    if not errors and (returncode not in (0, None) or result.succeeded is False) \
            and not result.compiled:
        errors.append(f"edgetpu_compiler failed (exit status {returncode}) without a known "
                      "message (its last lines follow)" if printed else
                      f"the compiler exited with status {returncode} and printed nothing: is it "
                      "edgetpu_compiler? (`edgeapp compiler show` says which one compile runs)")
    if errors:
        return Judgement("failed", int(ExitCode.COMPILE_FAILED), errors)
    if not result.compiled and result.total_ops is None:
        return Judgement("failed", int(ExitCode.COMPILE_FAILED),
                         [f"edgetpu_compiler printed no compilation result (exit status "
                          f"{returncode})"])
    if missing_outputs:
        return Judgement("failed", int(ExitCode.COMPILE_FAILED),
                         [f"the compiler reported success but did not write {', '.join(missing_outputs)}"])
    if result.subgraphs == 0 or result.ops_tpu == 0:
        return Judgement("not_mapped", int(ExitCode.NOT_MAPPABLE),
                         [f"nothing runs on the Edge TPU ({result.subgraphs} Edge TPU subgraph(s), "
                          f"{result.ops_tpu} of {result.total_ops} operation(s) mapped) although "
                          "the compiler reports success; `edgeapp check` shows why"
                          + _cpu_list(result)])
    if result.off_chip_bytes:
        warnings.append(f"{format_bytes(result.off_chip_bytes)} of parameters do not fit the on-chip "
                        "cache and are streamed from host memory on every inference (slower)")
    if result.ops_cpu:
        warnings.append(f"{result.ops_cpu} of {result.total_ops} operation(s) run on the CPU"
                        + _cpu_list(result))
        warnings += partial_causes(result)
        return Judgement("partially_mapped", int(ExitCode.NOT_MAPPABLE), [], warnings)
    if result.ops_tpu is None:
        warnings.append("the compiler did not report how many operations run on the Edge TPU")
    return Judgement("fully_mapped", int(ExitCode.OK), [], warnings)


def _cpu_list(result: CompileResult) -> str:
    cpu = result.cpu_operators
    if not cpu:
        return ""
    return ": " + "; ".join(f"{o.operator}×{o.count} ({o.status})" for o in cpu)




# ----------------------------------------------------------------------------- partial mapping


def partial_causes(result: CompileResult) -> list[str]:
    """Why operations the Edge TPU supports still run on the CPU, from the operator statuses."""
    statuses = [o.status for o in result.cpu_operators]
    notes = []
    if any(SUBGRAPH_CUT in s for s in statuses):
        notes.append(f'"{SUBGRAPH_CUT}": the Edge TPU runs one part of the graph, up to the first '
                     "operation it cannot map; every later operation stays on the CPU. Compile "
                     "with --search-delegate (as Ultralytics' export does), or use a smaller "
                     "input size (YOLO: a smaller imgsz) if the cut is in the head")
    if any(UNSPECIFIED in s for s in statuses):
        notes.append(f'"{UNSPECIFIED}": usually a tensor too large for the on-chip memory; a '
                     "smaller input size (YOLO: a smaller imgsz) often maps it")
    return notes


IMGSZ_LADDER = (1280, 1024, 640, 512, 480, 416, 384, 352, 320, 288, 256, 224, 192, 160)


def suggest_imgsz(imgsz: int, ops_tpu: Optional[int] = None, total_ops: Optional[int] = None,
                  failed: bool = False) -> Optional[int]:
    """A smaller YOLO input size to try when a model maps partially (or fails on large
    activations): on-chip activation memory grows with the input area, so the size is scaled
    by the square root of the mapped fraction, then taken from Ultralytics' usual sizes (multiples
    of 32), always at least one step smaller. None when fully mapped or already at 160.

    A heuristic, not a promise: users report YOLOv8n mapping fully only at 320 or below, some
    exports only at 224.
    """
    if not failed and (ops_tpu is None or not total_ops or ops_tpu >= total_ops):
        return None
    fraction = 0.5 if failed or not total_ops else max(0.0, min(1.0, (ops_tpu or 0) / total_ops))
    target = imgsz * fraction ** 0.5
    smaller = [s for s in IMGSZ_LADDER if s < imgsz]
    if not smaller:
        return None
    fits = [s for s in smaller if s <= target]
    return fits[0] if fits else smaller[-1]


def _after(text: str, prefix: str) -> str:
    """`text` without `prefix` (str.removeprefix is Python 3.9+)."""
    return text[len(prefix):] if text.startswith(prefix) else text
