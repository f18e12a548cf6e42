"""Detection and keypoint data for `eval`: a COCO JSON (instances or person keypoints), or an
Ultralytics/YOLO dataset (a data.yaml with `names` and `path`/`val`, or a folder with images/
and labels/ of normalized `class cx cy w h` lines), all read into one COCO ground truth.

An image without a label file has no objects, as Ultralytics counts it. Image ids in saved
predictions are the data's own: a COCO JSON's ids; for a YOLO dataset the file stem (an int
when numeric), as Ultralytics' val writes them.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from edgeapp.errors import MissingDependency, UsageError
from edgeapp.flows.eval_data import EvalData, image_files, no_images


def _need(obj: object, keys: Tuple[str, ...], where: str) -> None:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: not an object")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise UsageError(f"{where}: missing {', '.join(repr(k) for k in missing)}")


def _check_id(value: object, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{where}: id must be a number or a string, not {value!r}")


def read_coco(path: Path, images: Optional[Path] = None) -> EvalData:
    """A COCO instances or person-keypoints JSON; images under --images, else beside it (or in
    an images/ folder beside it)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"labelled data {path}: not a readable JSON file ({e})") from None
    _need(doc, ("images", "annotations", "categories"), f"{path}")
    for key in ("images", "annotations", "categories"):
        if not isinstance(doc[key], list):
            raise UsageError(f"{path}: {key!r} must be a list, not {type(doc[key]).__name__}")
    keypoints = any(isinstance(c, dict) and "keypoints" in c for c in doc["categories"])
    names: Dict[Any, str] = {}
    for n, c in enumerate(doc["categories"]):
        _need(c, ("id", "name"), f"{path}: categories[{n}]")
        _check_id(c["id"], f"{path}: categories[{n}]")
        names[c["id"]] = str(c["name"])
    if not doc["images"]:
        raise no_images(path)
    folder = _image_folder(path, images, doc["images"])
    position, paths, ids, gt_images = {}, [], [], []
    for n, im in enumerate(doc["images"]):
        _need(im, ("id", "file_name"), f"{path}: images[{n}]")
        _check_id(im["id"], f"{path}: images[{n}]")
        position[im["id"]] = n
        paths.append(str(folder / im["file_name"]))
        ids.append(im["id"])
        gt_images.append({"id": n, "file_name": im["file_name"], "width": im.get("width"),
                          "height": im.get("height")})
    needed = ("image_id", "category_id", "bbox") + (("keypoints",) if keypoints else ())
    anns = []
    for n, a in enumerate(doc["annotations"]):
        where = f"{path}: annotations[{n}]"
        _need(a, needed, where)
        if a["image_id"] not in position:
            raise UsageError(f"{where}: image_id {a['image_id']!r} is not in images")
        if a["category_id"] not in names:
            raise UsageError(f"{where}: category_id {a['category_id']!r} is not in categories")
        box = _box(a["bbox"], where)
        try:
            area, crowd = float(a.get("area", box[2] * box[3])), int(a.get("iscrowd", 0) or 0)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: area and iscrowd must be numbers") from None
        ann = dict(a, id=n + 1, image_id=position[a["image_id"]], bbox=box, iscrowd=crowd, area=area)
        ann.pop("segmentation", None)  # boxes and keypoints only: masks are not evaluated
        if keypoints:  # COCO's own count of labelled keypoints, which OKS AP needs
            kps = a["keypoints"]
            if not isinstance(kps, list) or len(kps) % 3 or not all(isinstance(v, (int, float)) for v in kps):
                raise UsageError(f"{where}: keypoints must be a list of x, y, v triples")
            ann.setdefault("num_keypoints", sum(1 for v in kps[2::3] if v > 0))
        anns.append(ann)
    categories = [{"id": k, "name": v} for k, v in names.items()]
    if keypoints:
        categories = [dict(c) for c in doc["categories"]]
    return EvalData("keypoints" if keypoints else "detection",
                    "COCO person keypoints JSON" if keypoints else "COCO instances JSON", path,
                    paths, ids, names, coco={"images": gt_images, "annotations": anns,
                                             "categories": categories})


def _image_folder(path: Path, images: Optional[Path], listed: list) -> Path:
    if images is not None:
        if not images.is_dir():
            raise UsageError(f"--images {images}: not a folder")
        return images
    names = [str(im["file_name"]) for im in listed[:20] if isinstance(im, dict) and "file_name" in im]
    for folder in (path.parent, path.parent / "images"):
        if any((folder / n).exists() for n in names):
            return folder
    if not names:
        return path.parent  # images without file_name: said as such next
    raise UsageError(f"labelled data {path}: its images ({names[0]}, ...) are neither beside it nor in "
                     f"{path.parent / 'images'}: give --images DIR")


def _box(value: object, where: str) -> List[float]:
    try:
        box = [float(v) for v in value]
    except (TypeError, ValueError):
        box = []
    if len(box) != 4 or box[2] < 0 or box[3] < 0:
        raise UsageError(f"{where}: bbox {value!r} is not [x, y, width, height]")
    return box


# ----------------------------------------------------------------------------- YOLO


def read_yolo_yaml(path: Path) -> EvalData:
    """An Ultralytics data.yaml: `names` (a list or {index: name}), `path` (the root, relative
    to the file) and `val` (a folder of images, a .txt list of them, or a list of either)."""
    try:
        import yaml
    except ImportError:
        raise MissingDependency("reading a data.yaml needs PyYAML: pip install 'edgeapp[eval]'") from None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UsageError(f"labelled data {path}: not a readable YAML file ({str(e).splitlines()[0]})") from None
    _need(doc, ("names", "val"), f"{path}")
    names = doc["names"]
    if isinstance(names, list):
        names = dict(enumerate(names))
    if not isinstance(names, dict) or not all(isinstance(k, int) for k in names):
        raise UsageError(f"{path}: names must be a list or a mapping of class index to name")
    root = Path(str(doc.get("path") or ""))  # relative to the data.yaml, as Ultralytics reads it
    root = root if root.is_absolute() else path.parent / root
    vals = doc["val"] if isinstance(doc["val"], list) else [doc["val"]]
    images: List[Path] = []
    for v in vals:
        images += _listed_images(root / str(v), path)
    if not images:
        raise no_images(root / str(vals[0]))
    return _yolo(path, "Ultralytics data.yaml", images, {int(k): str(v) for k, v in names.items()})


def _listed_images(where: Path, yaml_path: Path) -> List[Path]:
    if where.is_dir():
        return image_files(where)
    if where.suffix == ".txt" and where.is_file():
        try:
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"{yaml_path}: val {where} cannot be read ({e})") from None
        lines = [s.strip() for s in text.splitlines() if s.strip()]
        return [Path(p) if os.path.isabs(p) else where.parent / p for p in lines]
    raise UsageError(f"{yaml_path}: val {where} is not a folder of images nor a .txt list of them")


def read_yolo_folder(root: Path) -> EvalData:
    """A folder with images/ and labels/; class names from a data.yaml or classes.txt in it."""
    images = image_files(root / "images")
    if not images:
        raise no_images(root / "images")
    names: Dict[int, str] = {}
    for listing in (root / "classes.txt", root / "labels" / "classes.txt"):
        if listing.is_file():
            lines = listing.read_text(encoding="utf-8").splitlines()
            names = {i: s.strip() for i, s in enumerate(lines) if s.strip()}
            break
    return _yolo(root, "YOLO images/ and labels/", images, names)


def label_path(image: Path) -> Path:
    """Ultralytics' rule: the last /images/ of the path becomes /labels/, the suffix .txt."""
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def _yolo(source: Path, fmt: str, images: List[Path], names: Dict[int, str]) -> EvalData:
    from edgeapp.core.vision.preprocess import image_size

    gt_images, anns, ids = [], [], []
    seen: set = set()
    for n, image in enumerate(images):
        size = image_size(image)  # (width, height) upright, or None: the run reports it
        w, h = size or (0, 0)
        gt_images.append({"id": n, "file_name": image.name, "width": w, "height": h})
        stem = image.stem
        ids.append(int(stem) if stem.isnumeric() else stem)
        for cls, cx, cy, bw, bh in read_label_file(label_path(image), names):
            seen.add(cls)
            box = [(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h]
            anns.append({"id": len(anns) + 1, "image_id": n, "category_id": cls, "bbox": box,
                         "area": box[2] * box[3], "iscrowd": 0})
    named = bool(names)
    if not named:
        names = {c: str(c) for c in range(max(seen) + 1 if seen else 0)}
    categories = [{"id": k, "name": v} for k, v in sorted(names.items())]
    data = EvalData("detection", fmt, source, [str(p) for p in images], ids, dict(sorted(names.items())),
                    coco={"images": gt_images, "annotations": anns, "categories": categories})
    if not named:
        data.named = False
        data.notes.append("no class names (data.yaml or classes.txt): class i is the model's i-th")
    return data


def read_label_file(path: Path, names: Dict[int, str]) -> List[Tuple[int, float, float, float, float]]:
    """The boxes of one label file (none when it does not exist); a malformed line or a class
    out of range is exit 2 naming the file and line."""
    if not path.is_file():
        return []
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read it ({e})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            values = [float(v) for v in parts]
        except ValueError:
            values = []
        if len(values) != 5 or not all(math.isfinite(v) for v in values) or values[0] != int(values[0]):
            raise UsageError(f"{path}:{n}: expected `class cx cy w h`, got {line.strip()!r}")
        cls = int(values[0])
        if cls < 0 or (names and cls not in names):
            raise UsageError(f"{path}:{n}: class {cls} is out of range (the data has "
                             f"{len(names)} classes: 0..{len(names) - 1})" if names else
                             f"{path}:{n}: class {cls} is negative")
        if not all(0.0 <= v <= 1.0 for v in values[1:]):
            raise UsageError(f"{path}:{n}: coordinates must be normalized to 0..1, got "
                             f"{line.strip()!r}")
        out.append((cls, *values[1:]))
    return out
