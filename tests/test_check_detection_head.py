"""`check` on a detection model whose CPU part is its head's decode (YOLO exports: box decode,
DFL softmax, transposes; SSD: TFLite_Detection_PostProcess): said once, and none of the generic
advice the user cannot act on for that head (keep channels-last, flatten before Softmax, the
TRANSPOSE that "cuts the subgraph"). When more than the head runs on the CPU, the generic
advice stays."""

import json
from pathlib import Path

import pytest

from edgeapp.errors import ExitCode

YOLO = Path(__file__).parent / "fixtures" / "yolo"
GENERIC = ("is not supported", "Softmax on a multi-dimensional tensor", "cuts the Edge TPU subgraph",
           "float tensors", "re-run `edgeapp convert`")


def _advice(stdout: str) -> list:
    return [line[len("advice"):].strip() for line in stdout.splitlines() if line.startswith("advice")]


@pytest.mark.parametrize("name, first", [
    ("yolov8_256_full_integer_quant", 191), ("yolov5u_256_full_integer_quant", 209),
    ("yolov5_classic_256", 184), ("yolov8_dfl_320", 191)])
def test_a_yolo_head_on_the_cpu_is_said_once_without_generic_advice(cli, name, first):
    r = cli("check", YOLO / f"{name}.tflite")
    assert r.exit_code == ExitCode.NOT_MAPPABLE, r.stderr
    [advice] = _advice(r.stdout)
    assert advice.startswith("a YOLO export (") and "the head's box decode" in advice
    assert "nothing to change" in advice and not any(g in advice for g in GENERIC)
    verdict = next(line for line in r.stdout.splitlines() if line.startswith("verdict"))
    assert f"first CPU op #{first} TRANSPOSE: where the detection head's decode begins" in verdict
    assert "channels-last" not in verdict

    s = json.loads(cli("check", YOLO / f"{name}.tflite", "--format", "json").stdout)["summary"]
    head = s["detection_head"]
    assert head["kind"] == "yolo" and head["first_op"] == first
    assert head["ops"] == [c["index"] for c in s["cpu_ops"]]
    assert "unsupported_op" in s["causes"]  # the facts stay; only the advice is about the head


def test_more_than_the_head_on_the_cpu_keeps_the_advice(cli):
    """YOLO11 at 256: its attention block already falls to the CPU (68% of the MACs)."""
    r = cli("check", YOLO / "yolo11_256_full_integer_quant.tflite")
    advice = _advice(r.stdout)
    assert "more than the head's decode; export again with a smaller imgsz" in advice[0]
    assert any(a.startswith("TRANSPOSE is not supported") for a in advice)
    assert any("cuts the Edge TPU subgraph" in a for a in advice)
    s = json.loads(cli("check", YOLO / "yolo11_256_full_integer_quant.tflite", "-f", "json").stdout)
    assert s["summary"]["detection_head"] is None


def test_an_ssd_postprocess_on_the_cpu_is_its_head(cli, det_models):
    r = cli("check", det_models["det_op_uint8"])
    advice = _advice(r.stdout)
    assert any("an SSD detector" in a and "TFLite_Detection_PostProcess" in a and
               "as in Coral's own SSD models" in a for a in advice), advice
    assert not any("TFLite_Detection_PostProcess is not supported" in a for a in advice)
    assert not any("cuts the Edge TPU subgraph" in a for a in advice)
