"""Containment: a model that crashes the native runtime is refused with one line, never a crash.

The crashing model is built here with the TFLite schema: one RESHAPE whose optional shape input
is -1 (absent). The flatbuffer is valid and passes edgeapp's validator, but ai-edge-litert
dereferences the missing tensor in allocate_tensors and dies with SIGSEGV. Every command runs as
a user runs it (a subprocess) with its own cache directory.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import default_runtime, tflite_schema

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = default_runtime()[0]  # ai-edge-litert, or tflite-runtime on Python <= 3.9
LITERT = " ".join(default_runtime())  # as edgeapp names it in its messages


def schema_model(path: Path, build) -> Path:
    """A .tflite written with the runtime's own schema bindings; `build(schema, model)` fills it."""
    import flatbuffers

    schema = tflite_schema()
    m = schema.ModelT()
    m.version = 3
    m.buffers = [schema.BufferT()]
    sg = schema.SubGraphT()
    m.subgraphs = [sg]
    build(schema, m, sg)
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))
    return path


def _tensor(schema, name, shape, dtype="FLOAT32"):
    t = schema.TensorT()
    t.name, t.shape, t.type, t.buffer = name, list(shape), getattr(schema.TensorType, dtype), 0
    return t


def _opcode(schema, name):
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = getattr(schema.BuiltinOperator, name)
    code.version = 1
    return code


def _op(inputs, outputs):
    schema = tflite_schema()
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, list(inputs), list(outputs)
    return op


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("containment")

    def reshape_without_shape(schema, m, sg):  # segfaults ai-edge-litert in allocate_tensors
        m.operatorCodes = [_opcode(schema, "RESHAPE")]
        sg.tensors = [_tensor(schema, "x", (1, 4, 4, 3)), _tensor(schema, "y", (1, 48))]
        sg.operators, sg.inputs, sg.outputs = [_op([0, -1], [1])], [0], [1]

    def add_of_two_inputs(schema, m, sg):  # classify feeds one input: the other "lacks data"
        m.operatorCodes = [_opcode(schema, "ADD")]
        sg.tensors = [_tensor(schema, n, (1, 4, 4, 3)) for n in ("a", "b", "sum")]
        sg.operators, sg.inputs, sg.outputs = [_op([0, 1], [2])], [0, 1], [2]

    def orphan_input(schema, m, sg):  # ADD's second input is neither an input, a constant nor made
        m.operatorCodes = [_opcode(schema, "ADD")]
        sg.tensors = [_tensor(schema, n, (1, 4, 4, 3)) for n in ("a", "orphan", "sum")]
        sg.operators, sg.inputs, sg.outputs = [_op([0, 1], [2])], [0], [2]

    def latin1_name(schema, m, sg):
        add_of_two_inputs(schema, m, sg)
        sg.tensors[0].name = b"caf\xe9"

    return {"crash": schema_model(folder / "crash.tflite", reshape_without_shape),
            "two_inputs": schema_model(folder / "two_inputs.tflite", add_of_two_inputs),
            "orphan": schema_model(folder / "orphan.tflite", orphan_input),
            "latin1": schema_model(folder / "latin1.tflite", latin1_name)}


def edgeapp(*args, cache: Path, cwd: Path = ROOT, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "EDGEAPP_CACHE_DIR": str(cache), **env}
    return subprocess.run([sys.executable, "-m", "edgeapp", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=environ, timeout=timeout, stdin=subprocess.DEVNULL)


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


@pytest.mark.parametrize("spawn", ["0", "1"], ids=["fork", "spawn"])
def test_a_model_that_segfaults_the_runtime_is_one_line_and_exit_4(models, color_images, tmp_path, spawn):
    cache = tmp_path / "cache"
    r = edgeapp("classify", models["crash"], color_images["red"], cache=cache, EDGEAPP_PROBE_SPAWN=spawn)
    assert r.returncode == 4, r.stderr
    assert lines(r.stderr) == [
        f"edgeapp: error: {models['crash']} crashes the TFLite runtime {LITERT} (SIGSEGV) while "
        "allocating tensors; the file is corrupt or uses an unsupported feature"]
    (entry,) = json.loads((cache / "probe.json").read_text())["models"].values()
    assert (entry["status"], entry["stage"]) == ("crash", "allocating tensors")

    for args in (("detect", models["crash"], color_images["red"]), ("bench", models["crash"], "-n", "1")):
        r = edgeapp(*args, cache=cache)  # the cached verdict: no child, same line
        assert r.returncode == 4, r.stderr
        (line,) = lines(r.stderr)
        assert "crashes the TFLite runtime" in line and "verdict cached" in line

    renamed = tmp_path / "renamed.tflite"  # the same bytes under another name: cached, named right
    renamed.write_bytes(models["crash"].read_bytes())
    r = edgeapp("classify", renamed, color_images["red"], cache=cache)
    assert r.returncode == 4 and f"error: {renamed} crashes the TFLite runtime" in r.stderr, r.stderr


def test_without_containment_a_native_crash_still_leaves_a_line(models, color_images, tmp_path):
    """EDGEAPP_TRUST_MODEL=1 hands the file straight to the runtime: it dies, but not silently
    (faulthandler writes to the real stderr while the runtime's own output is redirected)."""
    r = edgeapp("classify", models["crash"], color_images["red"], cache=tmp_path, EDGEAPP_TRUST_MODEL="1")
    assert r.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in r.stderr


def test_a_good_model_is_checked_once(tiny_model, color_images, tmp_path):
    cache = tmp_path / "cache"
    spawn = {"EDGEAPP_PROBE_SPAWN": "1", "EDGEAPP_DEBUG": "1"}  # the child is a logged command
    r = edgeapp("classify", tiny_model, color_images["red"], cache=cache, **spawn)
    assert r.returncode == 0 and "edgeapp: exec: " in r.stderr, r.stderr
    verdicts = json.loads((cache / "probe.json").read_text())["models"]
    assert [v["status"] for v in verdicts.values()] == ["pass"]
    before = (cache / "probe.json").read_bytes()
    r = edgeapp("classify", tiny_model, color_images["red"], cache=cache, **spawn)
    assert r.returncode == 0 and "exec:" not in r.stderr, r.stderr  # no child process this time
    assert (cache / "probe.json").read_bytes() == before


def test_invoke_time_refusals_are_exit_4_with_the_runtimes_words(models, color_images, tmp_path):
    """The orphan tensor has no data whatever the input: the model-check child finds it at invoke,
    and the verdict ("invalid", with the runtime's message) is cached for every command."""
    model = models["orphan"]
    for args in (("classify", color_images["red"]), ("bench", "-n", "1")):
        r = edgeapp(args[0], model, *args[1:], cache=tmp_path)
        assert r.returncode == 4, r.stderr
        assert f"error: {LITERT} cannot run {model}: Input tensor 1 lacks data" in r.stderr
        assert "internal error" not in r.stderr


def test_native_messages_glued_by_the_runtime_are_separated():
    from edgeapp.hw.runtime import runtime_error_text

    glued = RuntimeError("tflite/kernels/detection_postprocess.cc:782 (max_categories_per_anchor > 0) was "
                         "not true.Node number 12 (TFLite_Detection_PostProcess) failed to invoke.")
    assert runtime_error_text(glued) == (
        "tflite/kernels/detection_postprocess.cc:782 (max_categories_per_anchor > 0) was not true.; "
        "Node number 12 (TFLite_Detection_PostProcess) failed to invoke.")
    xnn = RuntimeError("Created TensorFlow Lite XNNPACK delegate for CPU.unsupported datatype (INT64) of "
                       "tensor 3 in XNNPACK delegate")
    assert runtime_error_text(xnn) == "unsupported datatype (INT64) of tensor 3 in XNNPACK delegate"


def test_a_tensor_name_that_is_not_utf8_is_refused_by_the_validator(models, color_images, tmp_path):
    for args in (("check", models["latin1"]), ("classify", models["latin1"], color_images["red"])):
        r = edgeapp(*args, cache=tmp_path)
        assert r.returncode == 4, r.stderr
        assert "tensor 0 has a name that is not UTF-8" in r.stderr


def test_fifo_and_devices_are_refused_without_reading(tmp_path, color_images):
    fifo = tmp_path / "model.tflite"
    os.mkfifo(fifo)
    for model in (fifo, Path("/dev/zero")):
        for args in (("check", model), ("classify", model, color_images["red"])):
            r = edgeapp(*args, cache=tmp_path, timeout=60)
            assert r.returncode == 4, r.stderr
            assert "is a FIFO" in r.stderr or "is a device" in r.stderr


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A small PNG declaring a huge grey image (rows of zeros compress to nothing)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = zlib.compress(b"\x00" * ((width + 1) * height), 9)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", rows) + chunk(b"IEND", b""))
    return path


def test_an_image_over_the_pixel_limit_is_a_record_error_and_no_warning(tiny_model, color_images, tmp_path):
    big = _png_header_only(tmp_path / "big.png", 9000, 9000)  # 81 MP: Pillow only warns at 89 MP
    r = edgeapp("classify", tiny_model, big, color_images["red"], "--format", "jsonl", cache=tmp_path)
    assert r.returncode == 3, r.stderr
    records = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert "9000x9000 image (81 megapixels) is over the 50-megapixel limit" in records[0]["error"]
    assert records[1]["classes"][0]["label"] == "red"
    assert "Warning" not in r.stderr
    r = edgeapp("classify", tiny_model, big, "--format", "jsonl", cache=tmp_path, EDGEAPP_MAX_PIXELS="1e8")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr  # allowed: decoded, no warning


def test_child_processes_never_import_from_the_working_directory(tiny_model, color_images, tmp_path):
    """A fake `ai_edge_litert/` and `json.py` where the user stands must not run in the model-check
    child (python -I) nor in doctor's import checks."""
    ran = tmp_path / "ran"
    for name in ("ai_edge_litert/__init__.py", "json.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"open({str(ran)!r}, 'a').write({name!r} + '\\n')\nraise SystemExit(3)\n")
    main = (f"import sys; sys.path[:0] = [{str(ROOT)!r}]; from edgeapp.cli.app import main; "
            f"sys.argv = ['edgeapp'] + sys.argv[1:]; main()")  # the user's own process, isolated
    env = {**os.environ, "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"), "EDGEAPP_PROBE_SPAWN": "1",
           "EDGEAPP_DEBUG": "1"}
    r = subprocess.run([sys.executable, "-I", "-c", main, "classify", str(tiny_model), str(color_images["red"])],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "edgeapp: exec: " in r.stderr and " -I -c " in r.stderr  # the child, logged
    r = subprocess.run([sys.executable, "-I", "-c", main, "doctor", "--format", "json"], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=300)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks[f"runtime {RUNTIME}"]["status"] == "ok", checks[f"runtime {RUNTIME}"]
    assert not ran.exists(), ran.read_text()


def test_a_2gb_sparse_file_is_refused_without_reading_it(tmp_path):
    """Under a 1 GB address-space limit: reading (or mapping) the whole file would fail."""
    import resource

    sparse = tmp_path / "zeros.tflite"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = subprocess.run([sys.executable, "-m", "edgeapp", "check", str(sparse)], capture_output=True, text=True,
                       cwd=ROOT, preexec_fn=limit, timeout=120)
    assert r.returncode == 4 and "is not a TFLite model" in r.stderr, r.stderr


def test_check_counts_ops_of_a_damaged_operator_without_an_internal_error(tmp_path):
    def conv_without_weights(schema, m, sg):  # CONV_2D with its input only
        m.operatorCodes = [_opcode(schema, "CONV_2D")]
        sg.tensors = [_tensor(schema, "x", (1, 8, 8, 3)), _tensor(schema, "y", (1, 8, 8, 4))]
        sg.operators, sg.inputs, sg.outputs = [_op([0], [1])], [0], [1]

    model = schema_model(tmp_path / "conv.tflite", conv_without_weights)
    r = edgeapp("check", model, "--format", "json", cache=tmp_path)
    assert r.returncode in (0, 8) and "internal error" not in r.stderr, r.stderr
    assert [o["op"] for o in json.loads(r.stdout)["ops"]] == ["CONV_2D"]


def test_nan_boxes_scores_classes_and_count_are_no_objects():
    import numpy as np

    from edgeapp.core.vision.boxes import stretch_fit
    from edgeapp.core.vision.detect import OutputInfo, find_layout, get_objects

    nan = float("nan")
    layout = find_layout([OutputInfo(0, "t0", (1, 3)), OutputInfo(1, "t1", (1, 3, 4)),
                          OutputInfo(2, "t2", (1,)), OutputInfo(3, "t3", (1, 3))])  # TF2 order
    boxes = [[nan, 0, 0.5, 0.5], [0.5, 0.5, 1, 1], [0, 0, 0.5, 0.5]]
    out = [np.array([[0.9, 0.8, 0.7]], np.float32), np.array([boxes], np.float32),
           np.array([nan], np.float32), np.array([[1, 2, nan]], np.float32)]
    objects = get_objects(out, layout, stretch_fit((100, 100), (64, 64)), threshold=0.5)
    assert [(o.id, round(o.score, 1)) for o in objects] == [(2, 0.8)]
