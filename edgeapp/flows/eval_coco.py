"""Detection and keypoint data for `eval`: a COCO JSON (instances or person keypoints), or an
Ultralytics/YOLO dataset (a data.yaml with `names` and `path`/`val`, or a folder with images/
and labels/ of normalized `class cx cy w h` lines), all read into one COCO ground truth.

An image without a label file has no objects, as Ultralytics counts it. Image ids in saved
predictions are the data's own: a COCO JSON's ids; for a YOLO dataset the file stem (an int
when numeric), as Ultralytics' val writes them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from edgeapp.core.eval.schema import check_coco, label_line, yaml_names
from edgeapp.core.limits import MAX_CLASSES
from edgeapp.core.vision.preprocess import image_size
from edgeapp.errors import UsageError
from edgeapp.flows.eval_data import EvalData, image_files, no_images, nothing_to_measure
from edgeapp.flows.eval_reading import file_kind, load_json, load_yaml, read_text


def read_coco(path: Path, images: Optional[Path] = None) -> EvalData:
    """A COCO instances or person-keypoints JSON (core/eval/schema.check_coco checks it); images
    under --images, else beside it (or in an images/ folder beside it)."""
    checked = check_coco(load_json(path), str(path))
    if not checked["file_names"]:
        raise no_images(path)
    keypoints = checked["keypoints"]
    anns = checked["annotations"]
    if not anns:
        raise nothing_to_measure(path, "it has no annotations")
    if keypoints and not any(a["num_keypoints"] for a in anns):
        raise nothing_to_measure(path, "no annotation has a labelled keypoint")
    folder = _image_folder(path, images, checked["file_names"])
    paths = [str(folder / name) for name in checked["file_names"]]
    _check_images(paths, path)
    gt_images = [{"id": n, "file_name": name, "width": (size or (None, None))[0],
                  "height": (size or (None, None))[1]}
                 for n, (name, size) in enumerate(zip(checked["file_names"], checked["sizes"]))]
    data = EvalData("keypoints" if keypoints else "detection",
                    "COCO person keypoints JSON" if keypoints else "COCO instances JSON", path,
                    paths, checked["image_ids"], checked["names"],
                    coco={"images": gt_images, "annotations": anns, "categories": checked["categories"]})
    data.category_ids = checked["category_ids"]
    data.class_at = checked["class_at"]
    return data


def _check_images(paths: List[str], source: Path) -> None:
    """A listed image that exists but is not a regular file (a FIFO, a device) is exit 2: the
    run would block opening it. A missing one is left out in the run (exit 3)."""
    for p in paths:
        kind = file_kind(p)
        if kind and kind != "missing":
            raise UsageError(f"labelled data {source}: image {p} is {kind}, not a regular file")


def _image_folder(path: Path, images: Optional[Path], listed: List[str]) -> Path:
    if images is not None:
        if not images.is_dir():
            raise UsageError(f"--images {images}: not a folder")
        return images
    names = list(listed[:20])
    for folder in (path.parent, path.parent / "images"):
        if any(file_kind(folder / n) != "missing" for n in names):
            return folder
    if not names:
        return path.parent  # images without file_name: said as such next
    raise UsageError(f"labelled data {path}: its images ({names[0]}, ...) are neither beside it nor in "
                     f"{path.parent / 'images'}: give --images DIR")


# ----------------------------------------------------------------------------- YOLO


def read_yolo_yaml(path: Path) -> EvalData:
    """An Ultralytics data.yaml: `names` (a list or {index: name}), `path` (the root, relative
    to the file) and `val` (a folder of images, a .txt list of them, or a list of either)."""
    doc = load_yaml(path)
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a mapping with names and val, got {type(doc).__name__}")
    missing = [k for k in ("names", "val") if k not in doc]
    if missing:
        raise UsageError(f"{path}: missing {', '.join(repr(k) for k in missing)}")
    names = yaml_names(doc["names"], str(path))
    given = doc.get("path")
    if given is not None and not isinstance(given, str):
        raise UsageError(f"{path}: path: expected a folder (a string), got {type(given).__name__}")
    root = Path(given or "")  # relative to the data.yaml, as Ultralytics reads it
    root = root if root.is_absolute() else path.parent / root
    vals = doc["val"] if isinstance(doc["val"], list) else [doc["val"]]
    if not vals or not all(isinstance(v, str) and v.strip() for v in vals):
        raise UsageError(f"{path}: val: expected a folder of images, a .txt list of them, or a "
                         f"non-empty list of those, got {doc['val']!r:.60}")
    images: List[Path] = []
    for v in vals:
        images += _listed_images(root / v, path)
    if not images:
        raise no_images(root / vals[0])
    return _yolo(path, "Ultralytics data.yaml", images, names)


def _listed_images(where: Path, yaml_path: Path) -> List[Path]:
    kind = file_kind(where)  # never is_dir(): a name too long raises there
    if kind == "a folder":
        return image_files(where)
    if where.suffix == ".txt" and kind == "":
        text = read_text(where)
        lines = [s.strip() for s in text.splitlines() if s.strip()]
        listed = [Path(p) if os.path.isabs(p) else where.parent / p for p in lines]
        for n, p in enumerate(listed, 1):
            kind = file_kind(p)
            if kind and kind != "missing":
                raise UsageError(f"{where}:{n}: {p} is {kind}, not a regular file")
        return listed
    raise UsageError(f"{yaml_path}: val {where} is not a folder of images nor a .txt list of them")


def read_yolo_folder(root: Path) -> EvalData:
    """A folder with images/ and labels/; class names from classes.txt in it (or in labels/)."""
    images = image_files(root / "images")
    if not images:
        raise no_images(root / "images")
    names: Dict[int, str] = {}
    for listing in (root / "classes.txt", root / "labels" / "classes.txt"):
        if file_kind(listing) != "missing":
            lines = read_text(listing).splitlines()
            names = {i: s.strip() for i, s in enumerate(lines) if s.strip()}
            if len(names) > MAX_CLASSES:
                raise UsageError(f"{listing}: {len(names)} classes; at most {MAX_CLASSES} are supported")
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
    gt_images, anns, ids = [], [], []
    class_at: Dict[int, str] = {}
    for n, image in enumerate(images):
        size = image_size(image)  # (width, height) upright, or None: the run reports it
        w, h = size or (0, 0)
        gt_images.append({"id": n, "file_name": image.name, "width": w, "height": h})
        stem = image.stem
        ids.append(int(stem) if stem.isascii() and stem.isdigit() and len(stem) < 19 else stem)
        for where, (cls, cx, cy, bw, bh) in read_label_file(label_path(image), names):
            if size is None:
                continue  # an unreadable image is left out by the run, its boxes with it
            class_at.setdefault(cls, where)
            box = [(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h]
            anns.append({"id": len(anns) + 1, "image_id": n, "category_id": cls, "bbox": box,
                         "area": box[2] * box[3], "iscrowd": 0})
    named = bool(names)
    if not named:  # the model's classes decide which ids are valid (EvalData.check_model_classes)
        names = {c: str(c) for c in sorted(class_at)}
    categories = [{"id": k, "name": v} for k, v in sorted(names.items())]
    data = EvalData("detection", fmt, source, [str(p) for p in images], ids, dict(sorted(names.items())),
                    coco={"images": gt_images, "annotations": anns, "categories": categories})
    data.class_at = class_at
    if not anns:
        raise nothing_to_measure(source, "no image has a labelled object (labels/*.txt)")
    if not named:
        data.named = False
        data.notes.append("no class names (data.yaml or classes.txt): class i is the model's i-th")
    return data


def read_label_file(path: Path, names: Dict[int, str]) -> List[Tuple[str, Tuple[int, float, float, float, float]]]:
    """("file:line", box) of one label file (none when it does not exist); a malformed line, a
    class out of range or a label that is not a regular UTF-8 file is exit 2 naming it."""
    if file_kind(path) == "missing":
        return []
    text = read_text(path, what="label file")
    return [(f"{path}:{n}", label_line(line, f"{path}:{n}", names))
            for n, line in enumerate(text.splitlines(), 1) if line.strip()]
