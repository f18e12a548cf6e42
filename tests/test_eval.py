"""`edgeapp eval` and `model.evaluate`: real models on small labelled sets made here, every metric
recomputed by the reference library (pycocotools, scikit-learn) from the predictions eval saved.

Detection: tests/fixtures/yolo's int8 detectors (trained on drawn shapes) on newly drawn shapes,
as an Ultralytics dataset and as a COCO JSON. Classification: the suite's colour classifier
(converted by our own `convert`) and its float Keras original. Segmentation and pose: the
stand-in models of tests/posesegment_models.py on images whose truth is known.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import eval_sets
import numpy as np
import posesegment_models as pm
import pytest
from conftest import ROOT
from media import write_color_folders
from PIL import Image

from edgeapp.errors import ExitCode

YOLO = ROOT / "tests" / "fixtures" / "yolo"
V8 = YOLO / "yolov8_256_full_integer_quant.tflite"
V11 = YOLO / "yolo11_256_full_integer_quant.tflite"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> dict:
    return eval_sets.shapes_set(tmp_path_factory.mktemp("shapes") / "set")


@pytest.fixture(scope="module")
def ps_models(tmp_path_factory) -> dict:
    return pm.build(tmp_path_factory)


def run_json(cli, *args) -> dict:
    r = cli("eval", *args, "--format", "json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def coco_eval(gt_path: Path, results: Path, iou_type: str = "bbox"):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    gt = COCO(str(gt_path))
    ev = COCOeval(gt, gt.loadRes(str(results)), iou_type)
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return ev


# ----------------------------------------------------------------------------- detection


def test_detection_metrics_are_pycocotools_on_the_saved_predictions(cli, shapes, tmp_path):
    doc = run_json(cli, V8, V11, "--data", shapes["coco"], "--images", shapes["images"],
                   "--save-predictions", tmp_path / "pred")
    assert [m["images"] for m in doc["models"]] == [12, 12]
    for entry, name in zip(doc["models"], ("yolov8_256_full_integer_quant", "yolo11_256_full_integer_quant")):
        saved = tmp_path / "pred" / f"{name}.json"
        rows = json.loads(saved.read_text())
        assert {r["image_id"] for r in rows} <= set(range(101, 113))  # the JSON's own ids
        assert {r["category_id"] for r in rows} <= {1, 2, 3}
        ev = coco_eval(shapes["coco"], saved)
        assert entry["metrics"]["map"] == pytest.approx(ev.stats[0], abs=1e-9)
        assert entry["metrics"]["map50"] == pytest.approx(ev.stats[1], abs=1e-9)
        for k, cat in enumerate(ev.params.catIds):
            p = ev.eval["precision"][:, :, k, 0, -1]
            assert entry["metrics"]["per_class"][eval_sets.NAMES[cat - 1]] == pytest.approx(p[p > -1].mean())
        assert entry["metrics"]["map50"] > 0.8  # real detectors on their own kind of images
        assert entry["runs_on"] == "cpu" and entry["images_per_s"] > 0 and entry["median_ms"] > 0
    assert doc["models"][1]["delta"]["map"] == pytest.approx(
        doc["models"][1]["metrics"]["map"] - doc["models"][0]["metrics"]["map"], abs=1e-6)


def test_the_two_dataset_layouts_give_the_same_numbers(cli, shapes, tmp_path):
    coco = run_json(cli, V8, "--data", shapes["coco"], "--images", shapes["images"])
    yolo = run_json(cli, V8, "--data", shapes["yaml"], "--save-predictions", tmp_path)
    folder = tmp_path / "folder"
    (folder / "images").mkdir(parents=True)
    shutil.copytree(shapes["images"], folder / "images" / "val")
    shutil.copytree(shapes["root"] / "labels", folder / "labels")
    (folder / "classes.txt").write_text("circle\nsquare\ntriangle\n")
    plain = run_json(cli, V8, "--data", folder)
    assert coco["models"][0]["metrics"] == yolo["models"][0]["metrics"] == plain["models"][0]["metrics"]
    assert yolo["data"]["format"] == "Ultralytics data.yaml"
    rows = json.loads((tmp_path / "yolov8_256_full_integer_quant.json").read_text())
    assert {r["image_id"] for r in rows} <= set(range(12))  # Ultralytics' ids: numeric stems
    assert {r["category_id"] for r in rows} <= {0, 1, 2}


def test_classes_are_matched_by_name_not_by_id(cli, shapes, tmp_path):
    """Ids with gaps and another order (as COCO's 90), names the model's: the same numbers."""
    doc = json.loads(shapes["coco"].read_text())
    new_id = {1: 17, 2: 3, 3: 90}
    doc["categories"] = [{"id": new_id[c["id"]], "name": c["name"].upper()} for c in doc["categories"]]
    for a in doc["annotations"]:
        a["category_id"] = new_id[a["category_id"]]
    remapped = tmp_path / "gaps.json"
    remapped.write_text(json.dumps(doc))
    plain = run_json(cli, V8, "--data", shapes["coco"], "--images", shapes["images"])
    gaps = run_json(cli, V8, "--data", remapped, "--images", shapes["images"])
    assert plain["models"][0]["metrics"]["map"] == gaps["models"][0]["metrics"]["map"]


def test_api_evaluate_returns_the_json(shapes, cli):
    import edgeapp

    with edgeapp.open_model(V8) as model:
        got = model.evaluate(shapes["yaml"])
    doc = run_json(cli, V8, "--data", shapes["yaml"])
    strip = ("images_per_s", "median_ms")
    assert {k: v for k, v in got["models"][0].items() if k not in strip} == \
        {k: v for k, v in doc["models"][0].items() if k not in strip}
    assert got["data"] == doc["data"]


def test_plot_is_written(cli, shapes, tmp_path):
    pytest.importorskip("matplotlib")
    r = cli("eval", V8, "--data", shapes["yaml"], "--plot", tmp_path / "pr.png")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "pr.png").read_bytes()[:4] == b"\x89PNG"


# ----------------------------------------------------------------------------- classification


@pytest.fixture(scope="module")
def color_set(tmp_path_factory) -> Path:
    return write_color_folders(tmp_path_factory.mktemp("eval_colors"), 8, seed=11)


@pytest.mark.filterwarnings("ignore:'k' \\(3\\) greater")  # 3 classes: top-5 is top-3
def test_classification_against_scikit_learn(cli, tiny_model, color_set, tmp_path):
    from sklearn.metrics import accuracy_score, top_k_accuracy_score

    doc = run_json(cli, tiny_model, "--data", color_set, "--save-predictions", tmp_path,
                   "--plot", tmp_path / "confusion.svg")
    m = doc["models"][0]["metrics"]
    assert (tmp_path / "confusion.svg").read_text().lstrip().startswith("<?xml")
    rows = [json.loads(line) for line in (tmp_path / f"{tiny_model.stem}.jsonl").read_text().splitlines()]
    assert len(rows) == 24
    labels = ["blue", "green", "red"]
    truth = [labels.index(r["truth"]) for r in rows]
    scores = np.zeros((len(rows), 3))
    for i, r in enumerate(rows):
        for c in r["classes"]:
            scores[i, c["id"]] = c["score"] + 1e-9 * c["id"]  # ties as eval ranks them
    first = [r["classes"][0]["id"] for r in rows]
    assert m["top1"] == pytest.approx(accuracy_score(truth, first))
    assert m["top5"] == pytest.approx(top_k_accuracy_score(truth, scores, k=3, labels=[0, 1, 2]))
    for k, name in enumerate(labels):
        mine = [t == k for t in truth]
        assert m["per_class"][name] == pytest.approx(
            accuracy_score(np.array(truth)[mine], np.array(first)[mine]))


def test_csv_layout_and_float_keras_beside_int8(cli, tiny_model, tiny_keras, color_set, tmp_path):
    csv_path = tmp_path / "labels.csv"
    lines = ["path,label"] + [f"{p},{p.parent.name}" for p in sorted(color_set.rglob("*.png"))]
    csv_path.write_text("\n".join(lines) + "\n")
    folders = run_json(cli, tiny_model, "--data", color_set)
    doc = run_json(cli, tiny_model, tiny_keras, "--data", csv_path)
    assert doc["models"][0]["metrics"] == folders["models"][0]["metrics"]
    int8, flt = doc["models"]
    assert flt["runs_on"] == "float on Keras"
    assert flt["metrics"]["top1"] > 0.9 and int8["metrics"]["top1"] > 0.9
    assert flt["delta"]["top1"] == pytest.approx(flt["metrics"]["top1"] - int8["metrics"]["top1"])


# ----------------------------------------------------------------------------- segmentation


def test_segmentation_against_scikit_learn(cli, ps_models, tmp_path):
    from sklearn.metrics import confusion_matrix, jaccard_score

    import edgeapp

    data = eval_sets.masks_set(tmp_path / "seg")
    doc = run_json(cli, ps_models["seg"], "--data", data, "--plot", tmp_path / "iou.png")
    m = doc["models"][0]["metrics"]
    assert (tmp_path / "iou.png").read_bytes()[:4] == b"\x89PNG"
    truth, pred = [], []
    with edgeapp.open_model(ps_models["seg"]) as model:
        for image in sorted((data / "images").iterdir()):
            _, full = model.segment(image)
            mask = np.asarray(Image.open(data / "masks" / image.name))
            keep = mask != 255
            truth.append(mask[keep])
            pred.append(full[keep])
    t, p = np.concatenate(truth), np.concatenate(pred)
    present = sorted(set(t) | set(p))
    ious = jaccard_score(t, p, labels=present, average=None)
    assert m["miou"] == pytest.approx(ious.mean())
    assert m["pixel_accuracy"] == pytest.approx(np.trace(confusion_matrix(t, p)) / t.size)
    assert m["per_class"] == pytest.approx({pm.SEG_LABELS[c]: v for c, v in zip(present, ious)})
    assert m["miou"] > 0.5


# ----------------------------------------------------------------------------- pose


def test_pose_oks_against_pycocotools(cli, ps_models, tmp_path):
    from edgeapp.core.vision.pose import KEYPOINTS

    folder = tmp_path / "pose"
    folder.mkdir()
    doc = {"images": [], "annotations": [], "categories": [
        {"id": 1, "name": "person", "keypoints": list(KEYPOINTS), "skeleton": []}]}
    rng = np.random.default_rng(4)
    for i in range(6):
        w, h = 64 + 8 * i, 80
        rgb = rng.integers(40, 230, 3)
        Image.fromarray(pm.uniform_image(rgb, (w, h))).save(folder / f"p{i}.png")
        r, g, b = (v / 255 for v in rgb)
        jitter = rng.normal(0, 1.5 * i, (17, 2))  # later images' truth drifts from the model's
        kps = []
        for k in range(17):
            kps += [float((g / 2 + 0.45 - 0.02 * k) * w + jitter[k, 0]),
                    float((r / 2 + 0.02 * k) * h + jitter[k, 1]), 2]
        doc["images"].append({"id": 7 + i, "file_name": f"p{i}.png", "width": w, "height": h})
        doc["annotations"].append({"id": i + 1, "image_id": 7 + i, "category_id": 1, "keypoints": kps,
                                   "num_keypoints": 17, "bbox": [0, 0, w, h], "area": w * h / 4,
                                   "iscrowd": 0})
    gt = folder / "person_keypoints.json"
    gt.write_text(json.dumps(doc))
    out = run_json(cli, ps_models["pose"], "--data", gt, "--save-predictions", tmp_path / "pred")
    m = out["models"][0]["metrics"]
    ev = coco_eval(gt, tmp_path / "pred" / f"{ps_models['pose'].stem}.json", "keypoints")
    assert m["oks_ap"] == pytest.approx(ev.stats[0], abs=1e-9)
    assert m["oks_ap50"] == pytest.approx(ev.stats[1], abs=1e-9)
    assert 0 < m["oks_ap"] < 1


# ----------------------------------------------------------------------------- bad data


def _yolo_folder(tmp_path: Path, shapes: dict, label_text: str) -> Path:
    folder = tmp_path / "bad"
    shutil.copytree(shapes["images"], folder / "images")
    shutil.copytree(shapes["root"] / "labels" / "val", folder / "labels")
    (folder / "classes.txt").write_text("circle\nsquare\ntriangle\n")
    (folder / "labels" / "0003.txt").write_text(label_text)
    return folder


@pytest.mark.parametrize("text, says", [
    ("0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.1 0.1\n", "0003.txt:2: class 7 is out of range"),
    ("1 0.5 0.5 0.2\n", "0003.txt:1: expected `class cx cy w h`"),
    ("x 0.5 0.5 0.2 0.2\n", "0003.txt:1: expected `class cx cy w h`"),
    ("nan 0.5 0.5 0.2 0.2\n", "0003.txt:1: expected `class cx cy w h`"),
    ("inf 0.5 0.5 0.2 0.2\n", "0003.txt:1: expected `class cx cy w h`"),
])
def test_bad_label_lines_are_exit_2_naming_file_and_line(cli, shapes, tmp_path, text, says):
    folder = _yolo_folder(tmp_path, shapes, text)
    r = cli("eval", V8, "--data", folder, "--save-predictions", tmp_path / "pred")
    assert r.exit_code == ExitCode.USAGE, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1
    assert not (tmp_path / "pred").exists()  # nothing half-written


def test_a_data_folder_without_images_is_exit_2(cli, tmp_path):
    (tmp_path / "empty" / "images").mkdir(parents=True)
    (tmp_path / "empty" / "labels").mkdir()
    r = cli("eval", V8, "--data", tmp_path / "empty")
    assert r.exit_code == ExitCode.USAGE and "no images" in r.stderr


@pytest.mark.parametrize("drop, says", [("categories", "missing 'categories'"),
                                         ("bbox", "annotations[0]: missing 'bbox'")])
def test_a_coco_json_missing_fields_is_exit_2(cli, shapes, tmp_path, drop, says):
    doc = json.loads(shapes["coco"].read_text())
    if drop == "bbox":
        del doc["annotations"][0]["bbox"]
    else:
        del doc[drop]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = cli("eval", V8, "--data", bad, "--images", shapes["images"])
    assert r.exit_code == ExitCode.USAGE and says in r.stderr, r.stderr


@pytest.mark.parametrize("field, value, says", [
    ("categories", 5, "'categories' must be a list"),
    ("images", {"a": 1}, "'images' must be a list"),
    ("image id", [1], "images[0].id: expected an id (an integer or a string)"),
    ("area", "x", "annotations[0].area: expected a finite number"),
])
def test_a_coco_json_with_wrong_types_is_exit_2(cli, shapes, tmp_path, field, value, says):
    """Wrongly typed fields are the data's fault, said in one line: never "internal error"."""
    doc = json.loads(shapes["coco"].read_text())
    if field == "image id":
        doc["images"][0]["id"] = value
    elif field == "area":
        doc["annotations"][0]["area"] = value
    else:
        doc[field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = cli("eval", V8, "--data", bad, "--images", shapes["images"])
    assert r.exit_code == ExitCode.USAGE and says in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1


def test_keypoints_without_num_keypoints_get_cocos_count(tmp_path):
    """OKS AP skips annotations with num_keypoints 0 (faster-coco-eval silently; pycocotools
    raises without the field): a keypoints JSON that leaves it out gets COCO's own count."""
    from edgeapp.flows.eval_coco import read_coco

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    doc = {"images": [{"id": 1, "file_name": "a.png"}],
           "categories": [{"id": 1, "name": "person", "keypoints": ["nose", "eye"]}],
           "annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 8, 8],
                            "keypoints": [1, 1, 2, 0, 0, 0]}]}
    (tmp_path / "k.json").write_text(json.dumps(doc))
    data = read_coco(tmp_path / "k.json")
    assert data.coco["annotations"][0]["num_keypoints"] == 1


def test_a_data_yaml_without_path_is_read_relative_to_itself(shapes, tmp_path, monkeypatch):
    """Roboflow's data.yaml has no `path:`: its val folder is beside it, also when the yaml is
    given as a relative path from another folder."""
    from edgeapp.flows.evaluate import read_data

    folder = tmp_path / "ds"
    shutil.copytree(shapes["images"], folder / "valid" / "images")
    shutil.copytree(shapes["root"] / "labels" / "val", folder / "valid" / "labels")
    (folder / "data.yaml").write_text("names: [circle, square, triangle]\nval: valid/images\n")
    monkeypatch.chdir(tmp_path)
    data = read_data(Path("ds") / "data.yaml")
    assert len(data.paths) == len(list(shapes["images"].iterdir()))


def test_a_model_of_another_task_is_exit_4_naming_both(cli, tiny_model, shapes, tmp_path):
    r = cli("eval", tiny_model, "--data", shapes["yaml"])
    assert r.exit_code == ExitCode.MODEL_INVALID, r.stderr
    assert "a classifier" in r.stderr and "detection data" in r.stderr and str(shapes["yaml"]) in r.stderr
    # found before any model runs: the detector first in line is not run, nothing is written
    r = cli("eval", V8, tiny_model, "--data", shapes["yaml"], "--save-predictions", tmp_path / "p")
    assert r.exit_code == ExitCode.MODEL_INVALID and "running" not in r.stderr, r.stderr
    assert not list((tmp_path / "p").glob("*.json"))


def test_api_evaluate_refuses_another_tasks_data(tiny_model, shapes):
    import edgeapp
    from edgeapp.errors import WrongTask

    with edgeapp.open_model(tiny_model) as model, pytest.raises(WrongTask, match="detection data"):
        model.evaluate(shapes["yaml"])


def test_a_corrupt_image_is_left_out_and_exit_3(cli, shapes, tmp_path):
    folder = _yolo_folder(tmp_path, shapes, (shapes["root"] / "labels" / "val" / "0003.txt").read_text())
    (folder / "images" / "0005.png").write_bytes(b"not a png at all")
    r = cli("eval", V8, "--data", folder, "--format", "json")
    assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
    entry = json.loads(r.stdout)["models"][0]
    assert entry["images"] == 11 and entry["failed"] == 1
    assert "0005.png" in r.stderr and "Traceback" not in r.stderr
    assert entry["metrics"]["map50"] > 0.8  # the others measured


def test_without_pycocotools_detection_is_exit_7_with_the_install_line(shapes):
    code = ("import sys; sys.modules['pycocotools'] = sys.modules['faster_coco_eval'] = None; "
            "sys.argv = ['edgeapp'] + sys.argv[1:]; "
            "from edgeapp.cli.app import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, "eval", str(V8), "--data", str(shapes["yaml"])],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == ExitCode.MISSING_DEPENDENCY, proc.stderr
    assert "pip install 'edgeapp[eval]'" in proc.stderr


def test_a_compiled_model_without_an_edge_tpu_is_measured_on_its_cpu_twin(cli, compiled_pair, color_set):
    compiled, twin = compiled_pair
    r = cli("eval", twin, compiled, "--data", color_set, "--format", "json")
    assert r.exit_code == 0, r.stderr
    cpu, edgetpu = json.loads(r.stdout)["models"]
    assert edgetpu["runs_on"] == "cpu" and "CPU" in r.stderr
    assert edgetpu["metrics"] == cpu["metrics"] and edgetpu["delta"]["top1"] == 0


# ----------------------------------------------------------------------------- the maths alone


def test_numpy_metrics_match_scikit_learn_on_random_predictions():
    from sklearn.metrics import accuracy_score, confusion_matrix, jaccard_score, top_k_accuracy_score

    from edgeapp.core.eval.metrics import add_masks, classification_metrics, segmentation_metrics

    rng = np.random.default_rng(0)
    scores = rng.random((300, 12))
    truth = rng.integers(0, 12, 300)
    truth[:60] = scores[:60].argmax(axis=1)  # some hits
    ranked = [list(np.argsort(-s)[:5]) for s in scores]
    m = classification_metrics(truth, ranked, {i: f"c{i}" for i in range(12)})
    assert m["top1"] == pytest.approx(accuracy_score(truth, scores.argmax(axis=1)))
    assert m["top5"] == pytest.approx(top_k_accuracy_score(truth, scores, k=5, labels=range(12)))
    t = rng.integers(0, 6, (40, 50)).astype(np.uint8)
    p = np.where(rng.random((40, 50)) < 0.6, t, rng.integers(0, 7, (40, 50)))
    t[:3] = 255  # not labelled
    counts = add_masks(np.zeros((7, 7), np.int64), t, p)
    keep = t != 255
    present = sorted(set(t[keep]) | set(p[keep]))
    seg = segmentation_metrics(counts, {})
    assert seg["miou"] == pytest.approx(jaccard_score(t[keep], p[keep], labels=present, average="macro"))
    assert seg["pixel_accuracy"] == pytest.approx(accuracy_score(t[keep], p[keep]))
    assert np.array_equal(counts[np.ix_(present, present)], confusion_matrix(t[keep], p[keep], labels=present))


def test_names_match_coral_style_gapped_labels():
    from edgeapp.core.eval.metrics import match_names

    model = {0: "person", 2: "car", 17: "Dog", 90: "toothbrush"}  # Coral's numbering
    data = {1: "person", 3: "car", 18: "dog"}  # COCO's category ids
    mapping, unknown = match_names(model, data)
    assert mapping == {0: 1, 2: 3, 17: 18} and unknown == []
    mapping, unknown = match_names({0: "person"}, data)
    assert mapping == {0: 1} and unknown == ["car", "dog"]


def test_a_worker_lost_mid_eval_is_in_its_notes_and_changes_no_metric(tiny_model, color_set):
    """eval on an Edge TPU runs the model in a worker (docs/recovery.md): one lost meanwhile is
    replaced, every image is still measured, and the model's notes count the outage."""
    import os
    import signal
    from contextlib import contextmanager

    from worker_procs import set_aside_earlier_workers, workers_of_this_process

    from edgeapp.flows.evaluate import evaluate_models, read_data
    from edgeapp.flows.open_task import Placement
    from edgeapp.hw.runtime import EngineOptions

    place = Placement("cpu", EngineOptions(isolate=True))
    data = read_data(color_set)
    clean = evaluate_models([str(tiny_model)], data, place)[0].entry
    set_aside_earlier_workers()

    @contextmanager
    def killing_the_worker(total: int, label: str):
        done = [0]

        def advance() -> None:
            done[0] += 1
            if done[0] == 3:
                os.kill(workers_of_this_process()[0], signal.SIGKILL)

        yield advance

    hit = evaluate_models([str(tiny_model)], data, place, progress=killing_the_worker)[0].entry
    assert hit["images"] == clean["images"] == 24 and hit["failed"] == 0
    assert hit["metrics"] == clean["metrics"]
    assert not any("engine lost" in note for note in clean["notes"])
    assert any(note.startswith("engine lost 1 time(s) (1 crash)") for note in hit["notes"]), hit["notes"]
