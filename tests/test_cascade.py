"""Cascades (`--then TASK:MODEL`, `--on LABEL`): the shipped shapes detector, then the colour
classifier of the tests on the crop of each box. The crop's classes must be what `classify`
gives for the same crop cut by hand and saved as a file."""

import json
from pathlib import Path

import pytest
from conftest import ROOT
from eval_sets import shapes_set

from edgeapp.flows.cascade import Cascade, parse_then
from edgeapp.flows.open_task import Placement, open_task

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return shapes_set(tmp_path_factory.mktemp("cascade_shapes"), count=4)


def _records(r):
    assert r.exit_code == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_a_crop_is_classified_as_classify_classifies_it_cut_by_hand(cli, shapes, tiny_model, tmp_path):
    from PIL import Image

    records = _records(cli("detect", DETECTOR, shapes["images"], "--then", f"classify:{tiny_model}",
                           "-f", "jsonl"))
    crops, expected = tmp_path / "crops", {}
    crops.mkdir()
    for rec in records:
        photo = Image.open(rec["path"]).convert("RGB")
        for i, obj in enumerate(rec["objects"]):
            assert obj["classes"], obj  # every box went to the classifier
            name = f"{len(expected):03d}.png"
            photo.crop(tuple(obj["bbox"])).save(crops / name)
            expected[name] = obj["classes"]
    assert len(expected) >= 6
    by_hand = {Path(r["path"]).name: r["classes"] for r in _records(cli("classify", tiny_model, crops, "-f", "jsonl"))}
    assert by_hand == expected


def test_only_the_boxes_of_the_labels_given_go_to_the_second_model(cli, shapes, tiny_model):
    records = _records(cli("detect", DETECTOR, shapes["images"], "--then", f"classify:{tiny_model}",
                           "--on", "square,circle", "-f", "jsonl"))
    objects = [o for r in records for o in r["objects"]]
    assert {o["label"] for o in objects if "classes" in o} <= {"square", "circle"}
    assert all("classes" in o for o in objects if o["label"] in ("square", "circle"))
    assert any("classes" not in o for o in objects if o["label"] == "triangle")


def test_a_track_is_classified_again_only_every_n_frames_or_when_it_grew(tiny_model):
    with open_task(tiny_model, "classify", Placement("cpu")) as second:
        cascade = Cascade(second, every=5)
        import numpy as np

        frame = np.zeros((120, 160, 3), np.uint8)
        frame[20:60, 20:60] = (0, 0, 255)  # red, BGR
        for f in range(12):
            fields = {"objects": [{"label": "square", "bbox": [20, 20, 60, 60], "track_id": 1}]}
            cascade.apply(fields, frame, f)
            assert fields["objects"][0]["classes"][0]["label"] == "red"
        assert cascade.runs == 3  # frames 0, 5, 10
        grown = {"objects": [{"label": "square", "bbox": [10, 10, 80, 80], "track_id": 1}]}
        cascade.apply(grown, frame, 12)
        assert cascade.runs == 4


@pytest.mark.parametrize("then, says", [("bogus", "write TASK:MODEL"), ("detect:x.tflite", "TASK one of"),
                                        ("classify:", "write TASK:MODEL")])
def test_a_bad_then_is_one_line_and_exit_2(cli, shapes, then, says):
    r = cli("detect", DETECTOR, shapes["images"], "--then", then)
    assert r.exit_code == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_label_the_detector_cannot_give_is_one_line_naming_its_labels(cli, shapes, tiny_model):
    r = cli("detect", DETECTOR, shapes["images"], "--then", f"classify:{tiny_model}", "--on", "circle,bird")
    assert r.exit_code == 2 and "bird" in r.stderr and "circle, square, triangle" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout


def test_then_after_a_classifier_is_no_option_of_it(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "--then", f"classify:{tiny_model}")
    assert r.exit_code == 2 and "--then" in r.stderr


def test_a_second_model_of_another_task_is_exit_4(cli, shapes):
    r = cli("detect", DETECTOR, shapes["images"], "--then", f"pose:{DETECTOR}")
    assert r.exit_code == 4, r.stderr


def test_the_camera_adds_the_crops_classes_to_every_frame(cli, tiny_model, tmp_path):
    from shapes_video import crossing_scene

    video = crossing_scene(frames=6).write(tmp_path / "cross.avi")
    out = tmp_path / "frames.jsonl"
    r = cli("camera", DETECTOR, "--source", video, "--then", f"classify:{tiny_model}", "--track", "-o", out)
    assert r.exit_code == 0, r.stderr
    frames = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(frames) == 6 and all(o.get("classes") for f in frames for o in f["objects"]), frames


def test_the_api_takes_then_per_call(tiny_model, shapes):
    import edgeapp

    image = sorted(shapes["images"].iterdir())[0]
    with edgeapp.open_model(DETECTOR, "cpu") as model:
        objects = model.detect(image, then=f"classify:{tiny_model}")
        assert objects and all(o["classes"] for o in objects)


def test_then_is_written_task_colon_model():
    assert parse_then("classify:a/b:c.tflite", "detect") == ("classify", "a/b:c.tflite")
