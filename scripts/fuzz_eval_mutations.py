"""The datasets and mutations of scripts/fuzz_eval_data.py: small clean COCO JSON, data.yaml,
YOLO folder and images + masks datasets, and what is done to them. Each mutation takes (rng,
dataset folder), changes it, and returns what a correct `eval` must do: "same" (exit 0 with
the clean metric), "refuse" (exit 2, or 3 when images are left out), "leave out" (exit 3 or
2) or "any" (neither an internal error nor a hang).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["circle", "square", "triangle"]


# ----------------------------------------------------------------------------- base datasets


def build_bases(work: Path) -> Dict[str, Path]:
    """The clean datasets: a COCO JSON, a data.yaml dataset, a YOLO folder, images + masks."""
    import cv2
    import eval_sets
    import numpy as np
    from PIL import Image

    bases = work / "bases"
    if (bases / "done").exists():
        return _base_paths(bases)
    shutil.rmtree(bases, ignore_errors=True)
    shapes = eval_sets.shapes_set(bases / "yaml", count=3, seed=7, sizes=((160, 128), (128, 160)))
    coco = bases / "coco"
    shutil.copytree(shapes["images"], coco / "images")
    shutil.copy(shapes["coco"], coco / "instances.json")
    folder = bases / "folder"
    shutil.copytree(shapes["images"], folder / "images")
    shutil.copytree(shapes["root"] / "labels" / "val", folder / "labels")
    (folder / "classes.txt").write_text("\n".join(NAMES) + "\n")
    (shapes["yaml"]).write_text("path: .\nval: images/val\nnames:\n" +
                                "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES)))
    masks = bases / "masks"
    (masks / "images").mkdir(parents=True)
    (masks / "masks").mkdir()
    for i in range(3):
        w, h = 40 + 8 * i, 40
        img = np.zeros((h, w, 3), np.uint8)
        img[:h // 2, :w // 2], img[:h // 2, w // 2:], img[h // 2:, :w // 2] = (255, 0, 0), (0, 255, 0), (0, 0, 255)
        mask = np.zeros((h, w), np.uint8)
        mask[:h // 2, :w // 2], mask[:h // 2, w // 2:], mask[h // 2:, :w // 2] = 1, 2, 3
        mask[h // 2 - 1:h // 2 + 1] = 255
        cv2.imwrite(str(masks / "images" / f"q{i}.png"), img[:, :, ::-1])
        Image.fromarray(mask).save(masks / "masks" / f"q{i}.png")
    (bases / "done").write_text("")
    return _base_paths(bases)


def _base_paths(bases: Path) -> Dict[str, Path]:
    return {"coco": bases / "coco", "yaml": bases / "yaml", "folder": bases / "folder",
            "masks": bases / "masks"}


def seg_model(work: Path) -> Path:
    """tests/posesegment_models.py's segmenter (4 classes), converted once."""
    import posesegment_models as pm

    out = work / "seg_model"
    if (out / "seg_int8.tflite").exists():
        return out / "seg_int8.tflite"

    class Factory:
        def mktemp(self, name: str) -> Path:
            out.mkdir(parents=True, exist_ok=True)
            return out

    return pm.build(Factory())["seg"]


# ----------------------------------------------------------------------------- mutations
# Each takes (rng, dataset folder) and returns what a correct eval must do: "same" (exit 0 with
# the clean metric), "refuse" (exit 2, or 3 when images are left out), "any" (not internal,
# no hang), "leave out" (exit 3 or 2).


def _json(folder: Path) -> Tuple[Path, dict]:
    path = folder / "instances.json"
    return path, json.loads(path.read_text())


def _put(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, allow_nan=True))


def coco_field(key: str, value, every: bool = True) -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        path, doc = _json(folder)
        table, field = key.split(".")
        items = doc[table] if every else [rng.choice(doc[table])]
        for item in items:
            item[field] = value() if callable(value) else value
        _put(path, doc)
        return "refuse"
    mutate.__name__ = f"coco {key}={str(value)[:20]}{'' if every else ' (one)'}"
    return mutate


def coco_string_ids(rng: random.Random, folder: Path) -> str:
    path, doc = _json(folder)
    for c in doc["categories"]:
        c["id"] = f"cat-{c['id']}"
    for a in doc["annotations"]:
        a["category_id"] = f"cat-{a['category_id']}"
    for im in doc["images"]:
        im["id"] = f"img-{im['id']}"
    for a in doc["annotations"]:
        a["image_id"] = f"img-{a['image_id']}"
    _put(path, doc)
    return "same"


def coco_big_ids(rng: random.Random, folder: Path) -> str:
    path, doc = _json(folder)
    big = rng.choice([2 ** 62, 2 ** 64, -2 ** 63, 10 ** 30])
    for c in doc["categories"]:
        c["id"] += big
    for a in doc["annotations"]:
        a["category_id"] += big
    _put(path, doc)
    return "same" if -2 ** 63 <= big + 3 < 2 ** 63 and -2 ** 63 <= big < 2 ** 63 else "refuse"


def coco_shuffle(rng: random.Random, folder: Path) -> str:
    path, doc = _json(folder)
    rng.shuffle(doc["categories"])
    rng.shuffle(doc["annotations"])
    doc["info"] = {"extra": [1, {"a": None}]}
    _put(path, doc)
    return "same"


def coco_duplicate(table: str) -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        path, doc = _json(folder)
        doc[table][-1]["id"] = doc[table][0]["id"]
        if table == "categories":
            doc[table][-1]["name"] = "other"
        _put(path, doc)
        return "refuse"
    mutate.__name__ = f"coco duplicate {table} id"
    return mutate


def coco_text(make: Callable[[str], bytes], name: str, expect: str = "refuse") -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        path = folder / "instances.json"
        path.write_bytes(make(path.read_text()))
        return expect
    mutate.__name__ = f"coco {name}"
    return mutate


def coco_deep(rng: random.Random, folder: Path) -> str:
    depth = rng.choice([100, 5000, 100000])
    path = folder / "instances.json"
    path.write_text(path.read_text()[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}")
    return "refuse"


def coco_drop_key(rng: random.Random, folder: Path) -> str:
    path, doc = _json(folder)
    table = rng.choice(["images", "annotations", "categories"])
    item = rng.choice(doc[table])
    del item[rng.choice(sorted(item))]
    _put(path, doc)
    return "any"


def byte_flips(target: str) -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        files = sorted(p for p in folder.rglob(target) if p.is_file())
        path = rng.choice(files)
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 8)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
        return "any"
    mutate.__name__ = f"byte flips in {target}"
    return mutate


def special_file(target: str, kind: str) -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        path = rng.choice(sorted(p for p in folder.rglob(target) if p.is_file()))
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            os.symlink("/dev/zero", path)
        return "refuse"
    mutate.__name__ = f"{kind} as {target}"
    return mutate


def png_header(width: int, height: int, mode: int = 0, depth: int = 8) -> bytes:
    """A PNG whose header claims width x height (a decompression bomb) with one tiny IDAT."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, depth, mode, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + \
        chunk(b"IEND", b"")


def pixel_bomb(target: str) -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        path = rng.choice(sorted(p for p in folder.rglob(target) if p.is_file()))
        path.write_bytes(png_header(20000, 20000))
        return "leave out" if "masks" not in target else "refuse"
    mutate.__name__ = f"pixel bomb as {target}"
    return mutate


def yolo_line(text: str, expect: str = "refuse") -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        path = rng.choice(sorted(folder.rglob("labels/**/*.txt")))
        lines = path.read_text().splitlines()
        lines.insert(rng.randint(0, len(lines)), text)
        path.write_text("\n".join(lines) + "\n")
        return expect
    mutate.__name__ = f"label line {text[:24]!r}"
    return mutate


def unnamed(line: str) -> Callable:
    """No class names (classes.txt removed): the model's classes decide; `line` added."""
    def mutate(rng: random.Random, folder: Path) -> str:
        (folder / "classes.txt").unlink()
        if not line:
            return "same"
        return yolo_line(line)(rng, folder)
    mutate.__name__ = f"no names, label line {line[:24]!r}"
    return mutate


def yolo_format(rng: random.Random, folder: Path) -> str:
    for path in folder.rglob("labels/**/*.txt"):
        lines = path.read_text().splitlines()
        path.write_bytes(("\r\n".join("  " + line + "   " for line in lines) + "\r\n\r\n").encode())
    return "same"


def yolo_no_labels(rng: random.Random, folder: Path) -> str:
    shutil.rmtree(next(folder.rglob("labels")))
    return "refuse"


def yolo_empty_labels(rng: random.Random, folder: Path) -> str:
    for path in folder.rglob("labels/**/*.txt"):
        path.write_text("")
    return "refuse"


def yaml_text(text: str, name: str, expect: str = "refuse") -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        (folder / "data.yaml").write_text(text)
        return expect
    mutate.__name__ = f"data.yaml {name}"
    return mutate


LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + \
    "path: .\nval: images/val\nnames: *i\n"
YAML_OK = "path: .\nval: images/val\nnames:\n  0: circle\n  1: square\n  2: triangle\n"


def classes_txt(data: bytes, name: str, expect: str = "refuse") -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        (folder / "classes.txt").write_bytes(data)
        return expect
    mutate.__name__ = f"classes.txt {name}"
    return mutate


def mask_values(value: int, bits: str, expect: str = "refuse") -> Callable:
    def mutate(rng: random.Random, folder: Path) -> str:
        import numpy as np
        from PIL import Image

        path = rng.choice(sorted((folder / "masks").glob("*.png")))
        mask = np.asarray(Image.open(path)).astype(np.int64)
        mask[rng.randrange(mask.shape[0]), rng.randrange(mask.shape[1])] = value
        if bits == "16":
            Image.fromarray(mask.astype(np.uint16)).save(path)
        elif bits == "32":  # PNG has no 32-bit grey: a TIFF mask of the same stem
            path.unlink()
            Image.fromarray(mask.astype(np.int32)).save(path.with_suffix(".tif"))
        else:
            Image.fromarray(mask.astype(np.uint8)).save(path)
        return expect
    mutate.__name__ = f"mask value {value} ({bits}-bit)"
    return mutate


def mask_all_ignored(rng: random.Random, folder: Path) -> str:
    import numpy as np
    from PIL import Image

    for path in (folder / "masks").glob("*.png"):
        size = Image.open(path).size
        Image.fromarray(np.full(size[::-1], 255, np.uint8)).save(path)
    return "refuse"


def mask_shape(rng: random.Random, folder: Path) -> str:
    import numpy as np
    from PIL import Image

    path = rng.choice(sorted((folder / "masks").glob("*.png")))
    if rng.random() < 0.5:
        Image.fromarray(np.zeros((7, 9), np.uint8)).save(path)
    else:
        Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(path)
    return "refuse"


def mask_16bit_same(rng: random.Random, folder: Path) -> str:
    import numpy as np
    from PIL import Image

    for path in (folder / "masks").glob("*.png"):
        Image.fromarray(np.asarray(Image.open(path)).astype(np.uint16)).save(path)
    return "same"


def nan_box() -> list:
    return [float("nan")] * 4


def F(key: str, value, one: int = 0) -> Callable:
    return coco_field(key, value, every=not one)


def Y(names: str, name: str, expect: str = "refuse") -> Callable:
    """A data.yaml with these `names` (the rest as the clean one)."""
    return yaml_text("path: .\nval: images/val\nnames: " + names, name, expect)


MUTATIONS: Dict[str, List[Callable]] = {
    "coco": [F("annotations.bbox", nan_box), F("annotations.bbox", [1, 2, float("inf"), 4]),
             F("annotations.bbox", "1234"), F("annotations.bbox", [1, 2, -3, 4], 1),
             F("annotations.bbox", [1, 2, 3], 1), F("annotations.bbox", [1, 2, 0, 4], 1),
             F("annotations.image_id", [101], 1), F("annotations.image_id", {"a": 1}, 1),
             F("annotations.category_id", [1], 1), F("annotations.category_id", {"id": 1}, 1),
             F("annotations.category_id", "1", 1), F("annotations.category_id", True, 1),
             F("annotations.area", 10 ** 400, 1), F("annotations.area", -1),
             F("annotations.area", float("nan"), 1), F("annotations.area", "12", 1),
             F("annotations.iscrowd", float("inf"), 1), F("annotations.iscrowd", -float("inf"), 1),
             F("annotations.iscrowd", 2 ** 64, 1), F("annotations.iscrowd", 2, 1),
             F("annotations.iscrowd", "0", 1),
             F("images.file_name", 5, 1), F("images.file_name", None, 1),
             F("images.file_name", "/etc/passwd", 1), F("images.file_name", ["a.png"], 1),
             F("images.id", 1.5, 1), F("images.width", "wide", 1),
             F("images.width", float("nan"), 1),
             F("categories.name", "", 1), F("categories.name", 5, 1),
             F("categories.name", None, 1), F("categories.id", [3], 1),
             F("categories.id", 2 ** 70, 1),
             coco_string_ids, coco_big_ids, coco_shuffle, coco_duplicate("categories"),
             coco_duplicate("images"), coco_deep, coco_drop_key,
             coco_text(lambda t: t[: len(t) // 2].encode(), "truncated"),
             coco_text(lambda t: b"\xff\xfe" + t.encode("utf-16-le"), "UTF-16"),
             coco_text(lambda t: b"[" + t.encode() + b"]", "as a list"),
             coco_text(lambda t: t.replace('"annotations": [', '"annotations": [], "x": [', 1).encode(),
                       "no annotations"),
             byte_flips("instances.json"), special_file("images/*.png", "fifo"),
             special_file("images/*.png", "device"), pixel_bomb("images/*.png")],
    "labels": [yolo_line("7 0.5 0.5 0.1 0.1"), yolo_line("100000000 0.5 0.5 0.1 0.1"),
             yolo_line("-1 0.5 0.5 0.1 0.1"), yolo_line("nan 0.5 0.5 0.1 0.1"), yolo_line("1 0.5 0.5 0.1"),
             yolo_line("1 0.5 0.5 1.5 0.1"), yolo_line("1 0.5 0.5 0 0.1"), yolo_line("1 nan 0.5 0.1 0.1"),
             yolo_line("1e400 0.5 0.5 0.1 0.1"), yolo_line("1.5 0.5 0.5 0.1 0.1"), yolo_line("", "same"),
             yolo_line("0x1 0.5 0.5 0.1 0.1"), yolo_line("1 0.5 0.5 0.1 0.1 7"), yolo_format, yolo_no_labels,
             yolo_empty_labels, byte_flips("labels/**/*.txt"), special_file("labels/**/*.txt", "fifo"),
             special_file("images/**/*.png", "fifo"), pixel_bomb("images/**/*.png")],
    "classes": [unnamed(""), unnamed("7 0.5 0.5 0.1 0.1"), unnamed("1000 0.5 0.5 0.1 0.1"),
             unnamed("100000000 0.5 0.5 0.1 0.1"), classes_txt("circle\nsquare\ntriangle\n".encode("utf-16"), "UTF-16"),
             classes_txt(b"circl\xe9\nsquare\ntriangle\n", "latin-1"),
             classes_txt("".join(f"c{i}\n" for i in range(100000)).encode(), "100,000 names"),
             classes_txt(b"circle\nsquare\n", "two names"), classes_txt(b"", "empty", "same"),
             classes_txt(b"\xef\xbb\xbfcircle\r\nsquare\r\ntriangle\r\n", "BOM and CRLF", "same"),
             classes_txt(b"triangle\nsquare\ncircle\n", "reordered", "any"),
             special_file("classes.txt", "fifo")],
    "yaml": [yaml_text(YAML_OK.replace("val: images/val", "val: []"), "val: []"),
             yaml_text(YAML_OK.replace("val: images/val", "val: nowhere"), "val missing folder"),
             yaml_text(YAML_OK.replace("val: images/val\n", ""), "no val"),
             yaml_text(YAML_OK.replace("val: images/val", "val: 5"), "val: 5"),
             Y("[" + ",".join(f"c{i}" for i in range(100000)) + "]\n", "100,000 names"),
             Y("" + "[" * 10000 + "]" * 10000 + "\n", "nested 10,000"),
             Y("" + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "mappings nested 3,000"),
             yaml_text(LAUGHS, "billion laughs"),
             Y("[circle, square, triangle]\n", "names as a list", "same"),
             Y("{0: circle, 1: [x], 2: triangle}\n", "a name that is a list"),
             Y("{'0': circle, '1': square, '2': triangle}\n", "string keys"),
             Y("!!python/object:os.system {}\n", "python tag"),
             yaml_text("path: 5\nval: images/val\nnames: [a, b, c]\n", "path: 5"),
             yaml_text("- a\n- b\n", "a list"), yaml_text("names: [a\nval: [", "broken"),
             Y("{}\n", "names empty"),
             byte_flips("data.yaml")],
    "masks": [mask_values(65535, "16"), mask_values(2 ** 31 - 1, "32"), mask_values(-5, "32"),
              mask_values(7, "8"), mask_values(254, "8"), mask_values(255, "8", "any"),
              mask_values(3, "8", "any"), mask_all_ignored, mask_shape, mask_16bit_same,
              special_file("masks/*.png", "fifo"), special_file("masks/*.png", "device"),
              special_file("images/*.png", "fifo"), pixel_bomb("masks/*.png"), pixel_bomb("images/*.png"),
              byte_flips("masks/*.png"), byte_flips("images/*.png"),
              classes_txt(b"background\nred\ngreen\nblue\n", "labels.txt", "any")],
}


def data_argument(family: str, base: str, folder: Path) -> Path:
    if family == "coco":
        return folder / "instances.json"
    if base == "yaml":
        return folder / "data.yaml"
    return folder
