"""Labelled data is checked before anything is measured: COCO JSON types, NaN and Infinity,
duplicates, strings and non-strings; YAML bombs and depth; FIFOs; pixel bombs; mask values;
class counts from the names or the model, never from the largest id; data with nothing to
measure. Each is exit 2 with one line naming the file and the line or JSON path, never an
internal error, a hang or a metric of 0.0 with exit 0.

Most cases read the data alone (flows/evaluate.read_data, no model); those that need the
model's classes run `eval` with the YOLO fixture (3 classes) or the stand-in segmenter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import eval_sets
import numpy as np
import posesegment_models as pm
import pytest
from conftest import ROOT
from PIL import Image

from edgeapp.errors import ExitCode, UsageError
from edgeapp.flows.evaluate import read_data

V8 = ROOT / "tests" / "fixtures" / "yolo" / "yolov8_256_full_integer_quant.tflite"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> dict:
    return eval_sets.shapes_set(tmp_path_factory.mktemp("checks") / "set", count=4,
                                sizes=((160, 128), (128, 160)))


@pytest.fixture(autouse=True)
def no_hang():
    """A reader that blocks (a FIFO opened) fails the test instead of hanging the suite."""
    def hung(*_):
        raise TimeoutError("the reader blocked")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def refused(path: Path, says: str, images: Path = None) -> str:
    with pytest.raises(UsageError) as e:
        read_data(path, images)
    message = str(e.value)
    assert says in message, message
    assert "\n" not in message
    return message


def coco_with(shapes: dict, tmp_path: Path, change) -> Path:
    doc = json.loads(shapes["coco"].read_text())
    change(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    return path


# ----------------------------------------------------------------------------- COCO JSON


def _set(table: str, field: str, value, every: bool = False):
    def change(doc):
        for item in (doc[table] if every else doc[table][:1]):
            item[field] = value
    return change


@pytest.mark.parametrize("change, says", [
    (_set("annotations", "image_id", [101]), "annotations[0].image_id: expected an id"),
    (_set("annotations", "image_id", {"id": 101}), "annotations[0].image_id: expected an id"),
    (_set("annotations", "category_id", [1]), "annotations[0].category_id: expected an id"),
    (_set("annotations", "category_id", True), "annotations[0].category_id: expected an id"),
    (_set("annotations", "category_id", "1"), "annotations[0].category_id: '1' is not an id in categories"),
    (_set("annotations", "bbox", "1234"), "annotations[0].bbox: expected 4 finite numbers"),
    (_set("annotations", "bbox", [float("nan")] * 4, every=True), "annotations[0].bbox: expected 4 finite"),
    (_set("annotations", "bbox", [1, 2, float("inf"), 4]), "annotations[0].bbox: expected 4 finite"),
    (_set("annotations", "bbox", [1, 2, 0, 4]), "annotations[0].bbox: expected a width and height above 0"),
    (_set("annotations", "bbox", [1, 2, 3]), "annotations[0].bbox: expected 4 finite numbers"),
    (_set("annotations", "area", 10 ** 400), "annotations[0].area: expected a finite number >= 0"),
    (_set("annotations", "area", -1, every=True), "annotations[0].area: expected a finite number >= 0"),
    (_set("annotations", "area", float("nan")), "annotations[0].area: expected a finite number"),
    (_set("annotations", "iscrowd", float("inf")), "annotations[0].iscrowd: expected 0 or 1"),
    (_set("annotations", "iscrowd", -float("inf")), "annotations[0].iscrowd: expected 0 or 1"),
    (_set("annotations", "iscrowd", 2 ** 64), "annotations[0].iscrowd: expected 0 or 1"),
    (_set("annotations", "iscrowd", "0"), "annotations[0].iscrowd: expected 0 or 1"),
    (_set("images", "file_name", 5), "images[0].file_name: expected a file name"),
    (_set("images", "file_name", None), "images[0].file_name: expected a file name"),
    (_set("images", "file_name", "/etc/passwd"), "images[0].file_name: expected a path relative"),
    (_set("images", "id", 1.5), "images[0].id: expected an id"),
    (_set("images", "width", float("nan")), "images[0].width: expected a whole number"),
    (_set("categories", "name", ""), "categories[0].name: expected a non-empty string"),
    (_set("categories", "name", 7), "categories[0].name: expected a non-empty string"),
    (_set("categories", "id", 2 ** 70), "categories[0].id: id 1180591620717411303424 is beyond a 64-bit"),
    (lambda d: d["categories"][2].update(id=d["categories"][0]["id"], name="other"),
     "categories[2].id: 1 is also categories[0]'s id"),
    (lambda d: d["categories"][2].update(name="CIRCLE"), "categories[2].name: 'CIRCLE' is also categories[0]'s"),
    (lambda d: d["images"][1].update(id=d["images"][0]["id"]), "images[1].id: 101 is also images[0]'s id"),
    (lambda d: d.update(annotations=[]), "nothing to measure: it has no annotations"),
    (lambda d: d.update(info={"deep": json.loads("[" * 70 + "]" * 70)}),
     "nested deeper than 64 levels"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_coco_fields_are_checked_naming_the_json_path(shapes, tmp_path, change, says):
    refused(coco_with(shapes, tmp_path, change), says, shapes["images"])


def test_coco_nested_beyond_the_recursion_limit_is_one_line(shapes, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"images": [], "x": ' + "[" * 100000 + "]" * 100000 + "}")
    refused(path, "nested deeper than 64 levels")


def test_deep_json_is_refused_even_when_a_library_raised_the_recursion_limit(tmp_path):
    """onnx2tf raises the recursion limit when it is imported; json's C parser then recurses
    past the stack on deep input and the process dies (a segfault took a whole test run down).
    The depth is counted before json parses: one line, in a child so a crash stays contained."""
    import subprocess
    import sys

    path = tmp_path / "deep.json"
    path.write_text('{"images": [], "x": ' + "[" * 200000 + "]" * 200000 + "}")
    code = ("import sys; sys.setrecursionlimit(10 ** 6)\n"
            "from edgeapp.errors import UsageError\n"
            "from edgeapp.flows.eval_reading import load_json\n"
            f"try:\n    load_json({str(path)!r})\nexcept UsageError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=str(ROOT))
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    assert "nested deeper than 64 levels" in r.stdout


def test_coco_string_ids_read_as_ids_and_saved_as_given(shapes, tmp_path):
    def strings(doc):
        for c in doc["categories"]:
            c["id"] = f"cat-{c['id']}"
        for a in doc["annotations"]:
            a["category_id"], a["image_id"] = f"cat-{a['category_id']}", f"img-{a['image_id']}"
        for im in doc["images"]:
            im["id"] = f"img-{im['id']}"
    data = read_data(coco_with(shapes, tmp_path, strings), shapes["images"])
    assert {c["id"] for c in data.coco["categories"]} == {1, 2, 3}  # the evaluator sees ints
    assert [data.own_category(k) for k in sorted(data.names)] == ["cat-1", "cat-2", "cat-3"]
    assert data.ids[0] == "img-101"


def test_a_fifo_among_coco_images_is_refused_without_blocking(shapes, tmp_path):
    folder = tmp_path / "images"
    shutil.copytree(shapes["images"], folder)
    os.unlink(folder / "0001.png")
    os.mkfifo(folder / "0001.png")
    refused(shapes["coco"], "0001.png is a FIFO, not a regular file", folder)


# ----------------------------------------------------------------------------- YAML


def yaml_set(shapes: dict, tmp_path: Path, text: str) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(shapes["root"] / "images", root / "images")
    shutil.copytree(shapes["root"] / "labels", root / "labels")
    (root / "data.yaml").write_text(text)
    return root / "data.yaml"


LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + \
    "path: .\nval: images/val\nnames: *i\n"


@pytest.mark.parametrize("text, says", [
    (LAUGHS, "aliases (*name) are not allowed"),
    ("path: .\nval: images/val\nnames: " + "[" * 10000 + "]" * 10000 + "\n", "nested deeper than 64"),
    ("path: .\nval: images/val\nnames: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n", "nested deeper than 64"),
    ("path: .\nval: []\nnames: [a, b, c]\n", "val: expected a folder of images"),
    ("path: .\nval: images/val\nnames: [" + ",".join(f"c{i}" for i in range(3000)) + "]\n",
     "names: 3000 classes; at most 2000"),
    ("path: .\nval: images/val\nnames: {0: circle, 1: [x], 2: triangle}\n", "names[1]: expected a non-empty string"),
    ("path: .\nval: images/val\nnames: {'0': circle}\n", "names: expected class indexes"),
    ("path: .\nval: images/val\nnames: !!python/object:os.system {}\n", "not a readable YAML file"),
    ("path: 5\nval: images/val\nnames: [a, b, c]\n", "path: expected a folder"),
    ("- a\n- b\n", "expected a mapping with names and val"),
    ("path: .\nval: images/val\x1b\nnames: [a]\n", "not a readable YAML file (unacceptable character"),
])
def test_data_yaml_is_read_within_limits(shapes, tmp_path, text, says):
    refused(yaml_set(shapes, tmp_path, text), says)


def test_data_yaml_names_as_a_list_or_a_mapping(shapes, tmp_path):
    data = read_data(yaml_set(shapes, tmp_path, "path: .\nval: images/val\nnames: [circle, square, triangle]\n"))
    assert data.names == {0: "circle", 1: "square", 2: "triangle"}


# ----------------------------------------------------------------------------- YOLO folders


def yolo_folder(shapes: dict, tmp_path: Path, classes: bytes = b"circle\nsquare\ntriangle\n") -> Path:
    folder = tmp_path / "yolo"
    shutil.copytree(shapes["images"], folder / "images")
    shutil.copytree(shapes["root"] / "labels" / "val", folder / "labels")
    if classes is not None:
        (folder / "classes.txt").write_bytes(classes)
    return folder


def test_classes_txt_that_is_not_utf8_is_exit_2(shapes, tmp_path):
    refused(yolo_folder(shapes, tmp_path, b"circl\xe9\nsquare\n"), "classes.txt: not UTF-8 text")


@pytest.mark.parametrize("where", ["labels/0002.txt", "images/0002.png", "classes.txt"])
def test_a_fifo_among_labels_images_or_names_is_refused_without_blocking(shapes, tmp_path, where):
    folder = yolo_folder(shapes, tmp_path)
    os.unlink(folder / where)
    os.mkfifo(folder / where)
    refused(folder, "a FIFO, not a regular file")


def test_a_fifo_as_data_is_refused(tmp_path):
    os.mkfifo(tmp_path / "data.json")
    refused(tmp_path / "data.json", "a FIFO, not a file or folder")


@pytest.mark.parametrize("labels, says", [
    ("", "nothing to measure"),
    (None, "nothing to measure"),
    ("1 0.5 0.5 0 0.1\n", "0000.txt:1: expected cx cy w h normalized"),
])
def test_labels_without_objects_are_nothing_to_measure(shapes, tmp_path, labels, says):
    folder = yolo_folder(shapes, tmp_path)
    for p in (folder / "labels").glob("*.txt"):
        if labels is None:
            p.unlink()
        else:
            p.write_text(labels if p.name == "0000.txt" else "")
    refused(folder, says)


def test_unnamed_classes_come_from_the_model_not_the_largest_id(cli, shapes, tmp_path):
    """Without class names, a label's class 7 for a 3-class model is exit 2 naming the file
    and line (it was an eighth class with AP 0 that dragged the mean), and 1e8 costs nothing."""
    for cls in ("7", "100000000"):
        folder = yolo_folder(shapes, tmp_path / cls, classes=None)
        with (folder / "labels" / "0002.txt").open("a") as f:
            f.write(f"{cls} 0.5 0.5 0.1 0.1\n")
        r = cli("eval", V8, "--data", folder, "--no-probe")
        assert r.exit_code == ExitCode.USAGE, r.stderr
        assert f"0002.txt:{len((folder / 'labels' / '0002.txt').read_text().splitlines())}: class {cls} is " \
               "out of range (the model has 3 classes: 0..2)" in r.stderr
        assert "Traceback" not in r.stderr


def test_a_model_without_labels_counts_its_classes_from_its_outputs(cli, shapes, tmp_path):
    """Neither the data nor the model names its classes (a YOLO export copied without its
    sidecar): the class count comes from the model's outputs, so a label's class 7 for a
    3-class model is still exit 2, never an eighth class."""
    bare = tmp_path / "bare.tflite"  # classic YOLOv5, no names in its metadata, no sidecar
    bare.write_bytes((V8.parent / "yolov5_classic_256.tflite").read_bytes())
    folder = yolo_folder(shapes, tmp_path / "data", classes=None)
    with (folder / "labels" / "0002.txt").open("a") as f:
        f.write("7 0.5 0.5 0.1 0.1\n")
    r = cli("eval", bare, "--data", folder, "--no-probe")
    assert r.exit_code == ExitCode.USAGE, r.stderr
    assert "class 7 is out of range (the model has 3 classes: 0..2)" in r.stderr, r.stderr


def png_bomb(path: Path, width: int = 20000, height: int = 20000) -> None:
    """A PNG whose header claims width x height: Pillow's decompression-bomb check fires."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_a_pixel_bomb_among_images_is_left_out_and_exit_3(cli, shapes, tmp_path):
    folder = yolo_folder(shapes, tmp_path)
    png_bomb(folder / "images" / "0001.png")
    r = cli("eval", V8, "--data", folder, "--no-probe", "--format", "json")
    assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
    assert "0001.png" in r.stderr and "megapixel limit" in r.stderr and "Traceback" not in r.stderr
    entry = json.loads(r.stdout)["models"][0]
    assert (entry["images"], entry["failed"]) == (3, 1)


def test_a_class_the_model_lacks_is_said_with_its_share_and_the_mean_without_it(cli, shapes, tmp_path):
    def hexagons(doc):
        doc["categories"].append({"id": 9, "name": "hexagon"})
        for n, a in enumerate(list(doc["annotations"][:2])):
            doc["annotations"].append(dict(a, id=1000 + n, category_id=9))
    path = coco_with(shapes, tmp_path, hexagons)
    total = len(json.loads(path.read_text())["annotations"])
    r = cli("eval", V8, "--data", path, "--images", shapes["images"], "--no-probe", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert f"the model has no class hexagon ({2 / total:.1%} of the objects)" in r.stderr
    m = json.loads(r.stdout)["models"][0]["metrics"]
    assert m["per_class"].get("hexagon", 0.0) == 0.0
    assert m["map_model_classes"] > m["map"]
    table = cli("eval", V8, "--data", path, "--images", shapes["images"], "--no-probe")
    assert "map_model_classes" in table.stdout.splitlines()[0]


# ----------------------------------------------------------------------------- masks


@pytest.fixture(scope="module")
def seg(tmp_path_factory) -> Path:
    return pm.build(tmp_path_factory)["seg"]


@pytest.mark.parametrize("value, dtype, mode", [(65535, np.uint16, None), (2 ** 31 - 1, np.int32, "I"),
                                                (7, np.uint8, None), (-3, np.int32, "I")])
def test_mask_values_beyond_the_models_classes_are_exit_2(cli, seg, tmp_path, value, dtype, mode):
    root = eval_sets.masks_set(tmp_path / "m", count=2)
    path = root / "masks" / "q1.png"
    mask = np.asarray(Image.open(path)).astype(np.int64)
    mask[3, 4] = value
    if mode == "I":  # PNG has no 32-bit grey: a TIFF mask of the same stem
        path.unlink()
        path = path.with_suffix(".tif")
    Image.fromarray(mask.astype(dtype)).save(path)
    r = cli("eval", seg, "--data", root, "--no-probe")
    assert r.exit_code == ExitCode.USAGE, r.stderr
    assert f"{path.name}: mask value {value} is " in r.stderr and "Traceback" not in r.stderr


def test_masks_without_a_labelled_pixel_are_nothing_to_measure(cli, seg, tmp_path):
    root = eval_sets.masks_set(tmp_path / "m", count=2)
    for path in (root / "masks").glob("*.png"):
        Image.fromarray(np.full(Image.open(path).size[::-1], 255, np.uint8)).save(path)
    r = cli("eval", seg, "--data", root, "--no-probe")
    assert r.exit_code == ExitCode.USAGE and "nothing to measure" in r.stderr, r.stderr


def test_a_fifo_or_a_pixel_bomb_as_a_mask_is_exit_2(cli, seg, tmp_path):
    root = eval_sets.masks_set(tmp_path / "m", count=2)
    os.unlink(root / "masks" / "q1.png")
    os.mkfifo(root / "masks" / "q1.png")
    refused(root, "q1.png: a FIFO, not a regular file")
    os.unlink(root / "masks" / "q1.png")
    png_bomb(root / "masks" / "q1.png")
    r = cli("eval", seg, "--data", root, "--no-probe")
    assert r.exit_code == ExitCode.USAGE and "q1.png: the mask is too large" in r.stderr, r.stderr


def test_a_fixed_seed_sample_of_the_data_fuzzer(seg, tmp_path):
    """60 runs of scripts/fuzz_eval_data.py (the full run of 1,000 is in docs/eval.md): no
    internal error, no hang, no wrong metric, no valid data refused."""
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_eval_data.py"), "--seed", "3",
                           "--count", "60", "--work", str(tmp_path / "work"), "--seg-model", str(seg),
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    classes = json.loads(out.read_text())["summary"]["classes"]
    assert sum(classes.values()) == 60
    assert set(classes) <= {"ok", "exit 3"}, classes


def test_string_category_ids_are_saved_as_given_and_read_back(cli, shapes, tmp_path):
    """The evaluator sees the classes numbered 1..K; saved predictions keep the data's own
    (string) ids, and `--predictions` maps them back to the same metric."""
    def strings(doc):
        for c in doc["categories"]:
            c["id"] = f"cat-{c['id']}"
        for a in doc["annotations"]:
            a["category_id"] = f"cat-{a['category_id']}"
    path = coco_with(shapes, tmp_path, strings)
    first = cli("eval", V8, "--data", path, "--images", shapes["images"], "--no-probe", "--format", "json",
                "--save-predictions", tmp_path / "preds")
    assert first.exit_code == 0, first.stderr
    saved = next((tmp_path / "preds").glob("*.json"))
    assert {r["category_id"] for r in json.loads(saved.read_text())} <= {"cat-1", "cat-2", "cat-3"}
    again = cli("eval", "--predictions", saved, "--data", path, "--images", shapes["images"], "--format", "json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["models"][0]["metrics"]["map"] == \
        json.loads(first.stdout)["models"][0]["metrics"]["map"] > 0
    rows = json.loads(saved.read_text())
    rows[0]["category_id"] = 1  # the evaluator's own number is not the data's id
    saved.write_text(json.dumps(rows))
    wrong = cli("eval", "--predictions", saved, "--data", path, "--images", shapes["images"])
    assert wrong.exit_code == ExitCode.USAGE and "category_id 1 is not a category of the data" in wrong.stderr
