"""Labelled data for `eval` in the formats people already have (flows/evaluate.read_data finds
which one a --data argument is):

- classification: a folder of class folders, or a CSV of `path,label` (paths relative to it);
- detection: a COCO instances JSON, or an Ultralytics/YOLO dataset (a data.yaml, or a folder
  with images/ and labels/): flows/eval_coco.py;
- segmentation: a folder with images/ and masks/ (PNG of class ids, same stems, 255 = ignore);
- pose: a COCO person-keypoints JSON (flows/eval_coco.py).

Everything is read and checked before a model opens: a malformed label line, a class id out of
range, a COCO JSON missing fields or a data set without images is exit 2 naming the file (and
line). An image that cannot be decoded is found later, in the run: left out of the metric.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Dict, List

from edgeapp.core.eval.data import KINDS, EvalData  # noqa: F401 - read here, defined there
from edgeapp.core.labels import parse_labels
from edgeapp.core.limits import MAX_CLASSES
from edgeapp.errors import UsageError
from edgeapp.flows.eval_reading import file_kind, read_text
from edgeapp.flows.inputs import IMAGE_SUFFIXES


def image_files(folder: Path) -> List[Path]:
    """The images in a folder and its sub-folders, sorted (hidden files left out). One that is
    not a regular file (a FIFO, a device, a socket) is exit 2: reading it would block."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.startswith(".") or Path(f).suffix.lower() not in IMAGE_SUFFIXES:
                continue
            path = Path(root) / f
            kind = file_kind(path)
            if kind == "missing" and os.path.islink(path):
                continue  # a dangling link: not an image
            if kind:
                raise UsageError(f"labelled data {path}: {kind}, not a regular file")
            found.append(path)
    return found


def no_images(where: Path) -> UsageError:
    return UsageError(f"labelled data {where}: no images in it (looked for .jpg, .png, .bmp, ...)")


def nothing_to_measure(where: Path, why: str) -> UsageError:
    """Labelled data without a single object (or labelled pixel) to measure: exit 2, never a
    metric of 0.0 and exit 0."""
    return UsageError(f"labelled data {where}: nothing to measure: {why}")


def read_class_folders(root: Path) -> EvalData:
    try:
        classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError as e:
        raise UsageError(f"labelled data {root}: cannot list it ({e.strerror or e})") from None
    paths, truth = [], []
    for i, name in enumerate(classes):
        found = image_files(root / name)
        paths += [str(p) for p in found]
        truth += [i] * len(found)
    if not paths:
        loose = image_files(root)
        raise UsageError(f"labelled data {root}: images without class folders: put each class's images "
                         "in a folder named after the class") if loose else no_images(root)
    return EvalData("classification", "class folders", root, paths, paths,
                    dict(enumerate(classes)), truth)


def read_csv(path: Path) -> EvalData:
    """`path,label` rows (a header row `path,label` is allowed); paths relative to the CSV."""
    rows = []
    text = read_text(path)
    try:
        if True:
            for n, row in enumerate(csv.reader(io.StringIO(text, newline="")), 1):
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != 2 or not row[0].strip() or not row[1].strip():
                    raise UsageError(f"{path}:{n}: expected `path,label`, got {','.join(row)!r}")
                if n == 1 and [c.strip().lower() for c in row] == ["path", "label"]:
                    continue
                rows.append((row[0].strip(), row[1].strip()))
    except csv.Error as e:
        raise UsageError(f"labelled data {path}: cannot read it ({e})") from None
    if not rows:
        raise no_images(path)
    classes = sorted({label for _, label in rows})
    if len(classes) > MAX_CLASSES:
        raise UsageError(f"labelled data {path}: {len(classes)} classes; at most {MAX_CLASSES} are supported")
    index = {c: i for i, c in enumerate(classes)}
    paths = [p if os.path.isabs(p) else str(path.parent / p) for p, _ in rows]
    return EvalData("classification", "CSV of path,label", path, paths, [p for p, _ in rows],
                    dict(enumerate(classes)), [index[label] for _, label in rows])


def read_masks(root: Path) -> EvalData:
    """images/X.* with masks/X.png (class ids; 255 = ignore). Class names: a labels file
    (labels.txt) beside them when there is one, else the model's."""
    images = image_files(root / "images")
    if not images:
        raise no_images(root / "images")
    masks = {p.stem: p for p in image_files(root / "masks")}
    missing = [p for p in images if p.stem not in masks]
    if missing:
        raise UsageError(f"labelled data {root}: {missing[0]} has no mask masks/{missing[0].stem}.png "
                         f"({len(missing)} image(s) without one)")
    for image in images:
        kind = file_kind(masks[image.stem])
        if kind:
            raise UsageError(f"labelled data {masks[image.stem]}: {kind}, not a regular file")
    names: Dict[Any, str] = {}
    labels = root / "labels.txt"
    if file_kind(labels) != "missing":
        names = dict(parse_labels(read_text(labels, what="labels file")))
        if len(names) > MAX_CLASSES or any(k >= MAX_CLASSES for k in names):
            raise UsageError(f"{labels}: class ids up to {MAX_CLASSES - 1} are supported")
    return EvalData("segmentation", "images and masks", root, [str(p) for p in images],
                    [p.stem for p in images], names, [str(masks[p.stem]) for p in images])
