"""The Python API (edgeapp.open_model) gives the CLI's records, from paths, bytes, Pillow or numpy."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgeapp
from edgeapp.errors import ExitCode, InvalidModel

ROOT = Path(__file__).resolve().parent.parent


def without_latency(record: dict) -> dict:
    return {k: v for k, v in record.items() if k != "latency_ms"}


def test_import_edgeapp_is_cheap():
    code = "import sys, edgeapp; print(sorted(m for m in ('edgeapp.api', 'numpy', 'PIL') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_classify_batch_yields_the_cli_jsonl_records(cli, tiny_model, color_images, tmp_path):
    paths = [str(color_images[c]) for c in sorted(color_images)]
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    paths.append(str(bad))
    r = cli("classify", tiny_model, *paths, "-f", "jsonl", "--device", "cpu")
    cli_records = [without_latency(json.loads(line)) for line in r.stdout.splitlines()]
    model = edgeapp.open_model(tiny_model, device="cpu")
    api_records = [without_latency(rec) for rec in model.classify_batch(paths)]
    assert api_records == cli_records
    assert api_records[-1]["error"] and api_records[-1]["classes"] == []


def test_one_image_from_path_bytes_pillow_or_array_gives_the_same_classes(tiny_model, color_images):
    from PIL import Image

    path = color_images[sorted(color_images)[0]]
    model = edgeapp.open_model(str(tiny_model), device="cpu")
    expected = model.classify(path, top_k=3)
    assert model.classify(path.read_bytes(), top_k=3) == expected
    assert model.classify(Image.open(path), top_k=3) == expected
    assert model.classify(np.asarray(Image.open(path).convert("RGB")), top_k=3) == expected
    assert model.device == "cpu" and len(expected) == 3


def test_detect_matches_the_cli(cli, det_models, tmp_path):
    from PIL import Image

    a = np.zeros((64, 64, 3), np.uint8)
    a[16:32, 32:48, 0] = 255
    img = tmp_path / "red.png"
    Image.fromarray(a).save(img)
    r = cli("detect", det_models["det_tf1"], img, "-f", "jsonl", "--labels", det_models["labels"])
    expected = json.loads(r.stdout)["objects"]
    model = edgeapp.open_model(det_models["det_tf1"], labels=det_models["labels"])
    assert model.detect(str(img)) == expected == model.detect(a)
    assert [o["bbox"] for o in expected] == [[32, 16, 48, 32]]


def test_errors_are_typed(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"TFL3 but not really a model")
    with pytest.raises(InvalidModel):
        edgeapp.open_model(bad)


def test_example_script_classifies_a_folder(tiny_model, color_images, tmp_path):
    out = tmp_path / "top1.csv"
    folder = Path(color_images[sorted(color_images)[0]]).parent
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "classify_folder.py"), str(tiny_model),
                        str(folder), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == "path,label,score,error"
    assert len(rows) - 1 == len([p for p in folder.iterdir() if p.is_file()])


def test_a_model_for_another_task_is_refused_in_the_apis_words(tmp_path_factory, cli):
    """The API names the method and the task= that fit (the CLI names the command)."""
    import posesegment_models as pm

    from edgeapp.errors import WrongTask

    pose = pm.build(tmp_path_factory)["pose"]
    with pytest.raises(WrongTask) as refused:
        edgeapp.open_model(pose, "cpu", task="segment")
    message = str(refused.value)
    assert "model.pose(...)" in message and "task='pose'" in message and "edgeapp pose" not in message
    image = tmp_path_factory.mktemp("img") / "one.png"
    from PIL import Image

    Image.new("RGB", (96, 64), (200, 60, 230)).save(image)
    r = cli("segment", pose, image, "--device", "cpu")
    assert "use `edgeapp pose`" in r.stderr and "model.pose" not in r.stderr


@pytest.mark.parametrize("device", ["all", "usb:0,usb:1", "auto"])
def test_a_missing_model_is_an_invalid_model_whatever_the_device(cli, color_images, tmp_path, device):
    """Not "no Edge TPU found" (exit 5) when several TPUs are asked for: the model is what is
    wrong, and it is said first (exit 4; the API raises InvalidModel)."""
    missing = tmp_path / "nope.tflite"
    r = cli("classify", missing, color_images["red"], "--device", device)
    assert r.exit_code == ExitCode.MODEL_INVALID, r.stderr
    assert f"model not found: {missing}" in r.stderr
    with pytest.raises(InvalidModel, match="model not found"):
        edgeapp.open_model(missing, device=device)
