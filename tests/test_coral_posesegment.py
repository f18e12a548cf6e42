"""Pose, segmentation, check and --cpu-kernels on Coral's published models (../shared/coral).

What each fidelity test compares against, honestly:
- Coral's published MoveNet reference keypoints (test_data's
  movenet_single_pose_lightning_ptq_reference.csv, made from squat.bmp by libcoral's
  movenet_test) and pycoral's DeepLab mask (bird_segmentation_mask.bmp) need their images,
  which ../shared/coral does not have: those two tests run only when the images are put there.
- Always: edgeapp's results against Coral's own test procedure re-done here independently of
  edgeapp's pipeline (libcoral's bilinear resize + raw interpreter + libcoral's parse for
  MoveNet; Pillow LANCZOS + raw interpreter for DeepLab, as pycoral's segment_test), with
  pycoral's/libcoral's own bounds (±0.04 for keypoints scoring > 0.4, array IoU > 0.90), on
  the images shared/ has; plus what the images show (a person, a cat).
- check: predictions for the CPU models against what compiler 16 actually left on the CPU in
  the published _edgetpu twins.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, default_runtime
from PIL import Image

from edgeapp.core.edgetpu import check_report as CR
from edgeapp.core.tflite.model import load_model

pytestmark = pytest.mark.shared

MOVENET = SHARED / "movenet_single_pose_lightning_ptq.tflite"
DEEPLAB = SHARED / "deeplabv3_mnv2_dm05_pascal_quant.tflite"
PASCAL = SHARED / "pascal_voc_segmentation_labels.txt"
IMAGES = [SHARED / "grace_hopper.bmp", SHARED / "cat.bmp"]

# Coral's published reference for MoveNet lightning (CPU) on squat.bmp: google-coral/test_data
# movenet_single_pose_lightning_ptq_reference.csv (Apache-2.0), keypoint_id: (score, x, y).
SQUAT_REFERENCE = {
    0: (0.498168, 0.589104, 0.332112), 1: (0.44677, 0.597011, 0.320251),
    2: (0.55352, 0.561428, 0.312343), 3: (0.343973, 0.577242, 0.320251),
    4: (0.604918, 0.502122, 0.320251), 5: (0.55352, 0.55352, 0.427001),
    6: (0.846095, 0.430955, 0.399325), 7: (0.786789, 0.703761, 0.494214),
    8: (0.498168, 0.517937, 0.506076), 9: (0.296529, 0.672132, 0.423047),
    10: (0.343973, 0.656317, 0.403279), 11: (0.656317, 0.423047, 0.604918),
    12: (0.604918, 0.292575, 0.608872), 13: (0.747252, 0.577242, 0.644456),
    14: (0.604918, 0.411186, 0.672132), 15: (0.656317, 0.525844, 0.826326),
    16: (0.703761, 0.328158, 0.901447),
}


def reference_interpreter(model: Path):
    """A raw ai-edge-litert (else tflite-runtime) interpreter with TFLite's builtin kernels (no
    XNNPACK), as libcoral's and pycoral's tests run the CPU models."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:  # Python <= 3.9
        from tflite_runtime.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(model),
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def run_raw(it, pixels: np.ndarray) -> np.ndarray:
    it.set_tensor(it.get_input_details()[0]["index"], pixels[None])
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def edgeapp_json(cli, *args) -> list[dict]:
    r = cli(*[str(a) for a in args], "--format", "jsonl", "--cpu-kernels", "reference")
    assert r.exit_code == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def keypoints_normalized(rec: dict, size) -> dict[int, tuple[float, float, float]]:
    from edgeapp.core.vision.pose import KEYPOINTS

    w, h = size
    return {KEYPOINTS.index(k["name"]): (k["score"], k["x"] / w, k["y"] / h)
            for k in rec["poses"][0]["keypoints"]}


def close_keypoints(got: dict, want: dict, threshold: float = 0.4, tol: float = 0.04) -> int:
    """libcoral's CheckPoseEstimationResults: keypoints scoring > threshold in both are within
    tol in x and y; returns how many were checked."""
    checked = 0
    for k, (ws, wx, wy) in want.items():
        gs, gx, gy = got[k]
        if ws > threshold and gs > threshold:
            checked += 1
            assert abs(gx - wx) <= tol and abs(gy - wy) <= tol, (k, (gx, gy), (wx, wy))
    return checked


def test_movenet_matches_libcoral_test_procedure(cli):
    from edgeapp.core.vision.preprocess import resize_bilinear

    it = reference_interpreter(MOVENET)
    recs = edgeapp_json(cli, "pose", MOVENET, *IMAGES, "--threshold", "0")
    checked = 0
    for rec, path in zip(recs, IMAGES):
        img = Image.open(path).convert("RGB")
        out = run_raw(it, resize_bilinear(np.asarray(img), (192, 192))).reshape(17, 3)
        want = {k: (float(s), float(x), float(y)) for k, (y, x, s) in enumerate(out)}
        assert len(rec["poses"][0]["keypoints"]) == 17
        checked += close_keypoints(keypoints_normalized(rec, img.size), want, tol=0.005)
    assert checked >= 4
    # and the face is where a face is: Grace Hopper's eyes above her nose, shoulders below
    kp = keypoints_normalized(recs[0], Image.open(IMAGES[0]).size)
    assert kp[1][2] < kp[0][2] < kp[5][2] and kp[2][2] < kp[0][2] < kp[6][2]
    assert kp[6][1] < kp[0][1] < kp[5][1]  # her right shoulder is on the image's left


@pytest.mark.skipif(not (SHARED / "squat.bmp").exists(),
                    reason="Coral's squat.bmp (test_data) is not in ../shared/coral")
def test_movenet_matches_coral_published_reference(cli):
    (rec,) = edgeapp_json(cli, "pose", MOVENET, SHARED / "squat.bmp", "--threshold", "0")
    got = keypoints_normalized(rec, Image.open(SHARED / "squat.bmp").size)
    assert close_keypoints(got, SQUAT_REFERENCE) >= 17 // 2


def array_iou(a: np.ndarray, b: np.ndarray) -> float:
    """pycoral's segment_test measure: equal pixels over the union of the two arrays."""
    same = int((a == b).sum())
    return same / (a.size + b.size - same)


def test_deeplab_matches_pycoral_test_procedure(cli, tmp_path):
    it = reference_interpreter(DEEPLAB)
    recs = edgeapp_json(cli, "segment", DEEPLAB, *IMAGES, "--labels", PASCAL, "--mask", tmp_path)
    for rec, path in zip(recs, IMAGES):
        img = Image.open(path).convert("RGB")
        ref = run_raw(it, np.asarray(img.resize((513, 513), Image.LANCZOS)))[0]
        ref_full = np.asarray(Image.fromarray(ref.astype(np.uint8)).resize(img.size, Image.NEAREST))
        mask = np.asarray(Image.open(rec["mask"]))
        assert mask.shape == (img.size[1], img.size[0])
        assert array_iou(mask, ref_full) > 0.90
    shares = [{c["label"]: c["share"] for c in rec["classes"]} for rec in recs]
    assert shares[0].get("person", 0) > 0.4  # Grace Hopper
    assert shares[1].get("cat", 0) > 0.2  # the cat


@pytest.mark.skipif(not (SHARED / "bird_segmentation.bmp").exists(),
                    reason="pycoral's bird_segmentation.bmp and its mask are not in ../shared/coral")
def test_deeplab_matches_coral_published_mask(cli, tmp_path):
    (rec,) = edgeapp_json(cli, "segment", DEEPLAB, SHARED / "bird_segmentation.bmp", "--mask", tmp_path)
    reference = np.asarray(Image.open(SHARED / "bird_segmentation_mask.bmp"))
    mask = np.asarray(Image.open(rec["mask"]))
    if mask.shape != reference.shape:  # the published mask is at the model's 513x513
        mask = np.asarray(Image.fromarray(mask).resize(reference.shape[::-1], Image.NEAREST))
    assert array_iou(mask, reference) > 0.90


@pytest.mark.parametrize("name", ["deeplabv3_mnv2_dm05_pascal_quant", "movenet_single_pose_lightning_ptq"])
def test_check_predicts_what_compiler_16_left_on_the_cpu(name):
    """The published _edgetpu twin holds the CPU ops compiler 16 left outside its custom op."""
    cpu = load_model(SHARED / f"{name}.tflite")
    compiled = load_model(SHARED / f"{name}_edgetpu.tflite")
    left = Counter(op.op for op in compiled.operators if op.op != "edgetpu-custom-op")
    result = CR.check_model(cpu, (SHARED / f"{name}.tflite").read_bytes())
    predicted = Counter(p.op for p in result.ops if not p.mapped)
    assert predicted == left


def test_deeplab_check_explains_the_resize_and_points_to_segment():
    result = CR.check_model(load_model(DEEPLAB), DEEPLAB.read_bytes())
    first = result.ops[result.summary["first_cpu_op"]]
    assert first.op == "RESIZE_BILINEAR" and first.causes == ("precision",)
    assert "1x1 to 33x33" in first.reason and "precision" in first.reason
    assert any("`edgeapp segment`" in a for a in result.summary["advice"])


def test_reference_kernels_give_coral_published_cpu_scores(cli):
    """MobileNet v1 0.25 on cat.bmp: TFLite's reference rounding gives tiger cat 72/256 and
    Egyptian cat 63/256 (as tflite-runtime and Coral's CPU results); XNNPACK ties them at 68.
    The fast kernels are the runtime's default: XNNPACK for int8 on ai-edge-litert, the builtin
    (reference-rounding) kernels on tflite-runtime 2.14."""
    model, labels = SHARED / "mobilenet_v1_0.25_128_quant.tflite", SHARED / "imagenet_labels.txt"
    scores = {}
    for kernels in ("fast", "reference"):
        r = cli("classify", model, SHARED / "cat.bmp", "--labels", labels, "-k", "2", "-f", "jsonl",
                "--cpu-kernels", kernels)
        assert r.exit_code == 0, r.stderr
        scores[kernels] = {c["label"]: c["score"] for c in json.loads(r.stdout)["classes"]}
    assert scores["reference"] == {"tiger cat": pytest.approx(72 / 256, abs=1e-6),
                                   "Egyptian cat": pytest.approx(63 / 256, abs=1e-6)}
    tiger, egyptian = (68, 68) if default_runtime()[0] == "ai-edge-litert" else (72, 63)
    assert scores["fast"] == {"tiger cat": pytest.approx(tiger / 256, abs=1e-6),
                              "Egyptian cat": pytest.approx(egyptian / 256, abs=1e-6)}
