"""The schema of labelled data, checked before anything is measured: a COCO instances or
person-keypoints JSON, a YOLO label line, the `names` of a data.yaml. pycocotools' own loader
is not a validator: a NaN box, a string bbox, a duplicate category id or an `iscrowd` of
Infinity pass through it and change the metric silently, or crash the evaluator.

Each error is a UsageError (exit 2) naming the JSON path or the line and what was expected.
Ids are ints (within int64) or non-empty strings, as docs/eval.md allows; the ground truth
handed to the evaluator numbers images and categories by position, so the evaluator only ever
sees small ints.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple, Union

from typing_extensions import TypedDict

from edgeapp.core.limits import MAX_CLASSES
from edgeapp.errors import UsageError

INT64 = 2 ** 63

Id = Union[int, str]  # an image's or category's id as the data gives it


class CocoCategory(TypedDict, total=False):
    id: int  # renumbered from 1, in the data's order
    name: str
    keypoints: List[str]  # keypoint data: the keypoints' names


class CocoAnnotation(TypedDict, total=False):
    """A checked object: image_id is the image's position, category_id its category's index."""
    id: int
    image_id: int
    category_id: int
    bbox: List[float]  # x, y, width, height
    area: float
    iscrowd: int
    keypoints: List[float]  # x, y, v triples (keypoint data)
    num_keypoints: int


class CocoImage(TypedDict):
    id: int  # the image's position
    file_name: str
    width: Optional[int]
    height: Optional[int]


class CocoTruth(TypedDict):
    """Ground truth as the COCO evaluator reads it (renumbered: ids are positions, indexes)."""
    images: List[CocoImage]
    annotations: List[CocoAnnotation]
    categories: List[CocoCategory]


class KeypointsOf(TypedDict):
    keypoints: List[float]
    num_keypoints: int


class CheckedCoco(TypedDict):
    """A COCO JSON checked and renumbered (check_coco)."""
    keypoints: bool  # person keypoints data
    names: Dict[int, str]  # category index -> name
    category_ids: Dict[int, Id]  # category index -> the data's id
    file_names: List[str]
    image_ids: List[Id]  # the data's, in order
    sizes: List[Optional[Tuple[int, int]]]  # (width, height), None: not given
    annotations: List[CocoAnnotation]
    categories: List[CocoCategory]
    class_at: Dict[int, str]  # category index -> the JSON path of its first object


def is_number(value: object) -> bool:
    """An int or float (not a bool) that is finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return -INT64 <= value < INT64
    return math.isfinite(value)


def _id(value: object, where: str) -> Union[int, str]:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{where}: expected an id (an integer or a string), got {_show(value)}")
    if isinstance(value, int) and not -INT64 <= value < INT64:
        raise UsageError(f"{where}: id {_show(value)} is beyond a 64-bit integer")
    if isinstance(value, str) and not value.strip():
        raise UsageError(f"{where}: expected an id, got an empty string")
    return value


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _object(value: object, where: str, keys: Tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected an object, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise UsageError(f"{where}: missing {', '.join(repr(k) for k in missing)}")
    return value


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: expected a non-empty string as the name, got {_show(value)}")
    return value


def bbox(value: object, where: str) -> List[float]:
    """[x, y, width, height]: four finite numbers, width and height above 0."""
    if not isinstance(value, list) or len(value) != 4 or not all(is_number(v) for v in value):
        raise UsageError(f"{where}: expected 4 finite numbers [x, y, width, height], got {_show(value)}")
    box = [float(v) for v in value]
    if not all(math.isfinite(v) for v in box) or box[2] <= 0 or box[3] <= 0:
        raise UsageError(f"{where}: expected a width and height above 0, got {_show(value)}")
    return box


def check_coco(doc: object, source: str) -> CheckedCoco:
    """A COCO JSON checked and renumbered: {"keypoints": bool, "names": {category index: name},
    "category_ids": {index: the data's id}, "file_names", "image_ids" (the data's, in order),
    "sizes" [(w, h) or None], "annotations" (image_id = image position, category_id = index),
    "categories" (for the evaluator), "class_at": {index: the JSON path of its first object}}."""
    _object(doc, source, ("images", "annotations", "categories"))
    for key in ("images", "annotations", "categories"):
        if not isinstance(doc[key], list):
            raise UsageError(f"{source}: {key!r} must be a list, got {type(doc[key]).__name__}")
    if len(doc["categories"]) > MAX_CLASSES:
        raise UsageError(f"{source}: {len(doc['categories'])} categories; at most {MAX_CLASSES} are "
                         "supported")
    keypoints = any(isinstance(c, dict) and "keypoints" in c for c in doc["categories"])
    index, categories = _categories(doc["categories"], source, keypoints)
    position, file_names, image_ids, sizes = _images(doc["images"], source)
    anns: List[CocoAnnotation] = []
    class_at: Dict[int, str] = {}
    needed = ("image_id", "category_id", "bbox") + (("keypoints",) if keypoints else ())
    for n, a in enumerate(doc["annotations"]):
        where = f"{source}: annotations[{n}]"
        _object(a, where, needed)
        iid, cid = _id(a["image_id"], f"{where}.image_id"), _id(a["category_id"], f"{where}.category_id")
        if iid not in position:
            raise UsageError(f"{where}.image_id: {_show(iid)} is not an id in images")
        if cid not in index:
            raise UsageError(f"{where}.category_id: {_show(cid)} is not an id in categories")
        box = bbox(a["bbox"], f"{where}.bbox")
        area = a.get("area", box[2] * box[3])
        if not is_number(area) or area < 0:
            raise UsageError(f"{where}.area: expected a finite number >= 0, got {_show(area)}")
        crowd = a.get("iscrowd", 0)
        if not (isinstance(crowd, bool) or is_number(crowd)) or crowd not in (0, 1):  # false/true too
            raise UsageError(f"{where}.iscrowd: expected 0 or 1, got {_show(crowd)}")
        ann: CocoAnnotation = {"id": n + 1, "image_id": position[iid], "category_id": index[cid], "bbox": box,
                               "area": float(area), "iscrowd": int(crowd)}
        if keypoints:
            ann.update(_keypoints(a, where))
        class_at.setdefault(index[cid], f"{where}.category_id")
        anns.append(ann)
    return {"keypoints": keypoints, "names": {c["id"]: c["name"] for c in categories},
            "category_ids": {v: k for k, v in index.items()},
            "file_names": file_names, "image_ids": image_ids, "sizes": sizes, "annotations": anns,
            "categories": categories, "class_at": class_at}


def _categories(listed: list, source: str, keypoints: bool) -> Tuple[Dict[Any, int], List[CocoCategory]]:
    """({the data's category id: index from 1}, the categories renumbered)."""
    index: Dict[Any, int] = {}
    categories: List[CocoCategory] = []
    seen_names: Dict[str, str] = {}
    for n, c in enumerate(listed):
        where = f"{source}: categories[{n}]"
        _object(c, where, ("id", "name"))
        cid = _id(c["id"], f"{where}.id")
        if cid in index:
            raise UsageError(f"{where}.id: {_show(cid)} is also categories[{index[cid] - 1}]'s id; "
                             "category ids must be unique")
        name = _name(c["name"], f"{where}.name")
        folded = name.strip().lower()
        if folded in seen_names:
            raise UsageError(f"{where}.name: {name!r} is also {seen_names[folded]}'s name; category "
                             "names must be unique")
        seen_names[folded] = f"categories[{n}]"
        index[cid] = n + 1
        cat: CocoCategory = {"id": n + 1, "name": name}
        if keypoints and "keypoints" in c:
            kp = c["keypoints"]
            if not isinstance(kp, list) or not all(isinstance(k, str) for k in kp):
                raise UsageError(f"{where}.keypoints: expected a list of keypoint names")
            cat["keypoints"] = list(kp)
        categories.append(cat)
    return index, categories


def _images(listed: list, source: str) -> tuple:
    """({the data's image id: position}, file names, the data's ids, sizes)."""
    position: Dict[Any, int] = {}
    file_names, image_ids, sizes = [], [], []
    for n, im in enumerate(listed):
        where = f"{source}: images[{n}]"
        _object(im, where, ("id", "file_name"))
        iid = _id(im["id"], f"{where}.id")
        if iid in position:
            raise UsageError(f"{where}.id: {_show(iid)} is also images[{position[iid]}]'s id; image "
                             "ids must be unique")
        position[iid] = n
        name = im["file_name"]
        if not isinstance(name, str) or not name.strip() or "\0" in name:
            raise UsageError(f"{where}.file_name: expected a file name (a string), got {_show(name)}")
        if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
            raise UsageError(f"{where}.file_name: expected a path relative to the images folder, "
                             f"got {_show(name)}")
        file_names.append(name)
        image_ids.append(iid)
        sizes.append(_size(im, where))
    return position, file_names, image_ids, sizes


def _size(im: dict, where: str) -> Optional[Tuple[int, int]]:
    if im.get("width") is None and im.get("height") is None:
        return None
    w, h = im.get("width"), im.get("height")
    for key, v in (("width", w), ("height", h)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not is_number(v) or v <= 0 \
                or v != int(v):
            raise UsageError(f"{where}.{key}: expected a whole number of pixels above 0, got {_show(v)}")
    return int(w), int(h)  # type: ignore[arg-type]


def _keypoints(a: dict, where: str) -> KeypointsOf:
    kps = a["keypoints"]
    if not isinstance(kps, list) or not kps or len(kps) % 3 or not all(is_number(v) for v in kps):
        raise UsageError(f"{where}.keypoints: expected a list of finite x, y, v triples")
    if any(v not in (0, 1, 2) for v in kps[2::3]):
        raise UsageError(f"{where}.keypoints: a visibility v must be 0, 1 or 2")
    count = a.get("num_keypoints", sum(1 for v in kps[2::3] if v > 0))
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= len(kps) // 3:
        raise UsageError(f"{where}.num_keypoints: expected a count from 0 to {len(kps) // 3}, got "
                         f"{_show(count)}")
    return {"keypoints": [float(v) for v in kps], "num_keypoints": count}


# ----------------------------------------------------------------------------- YOLO


def label_line(line: str, where: str, names: Dict[int, str]) -> Tuple[int, float, float, float, float]:
    """`class cx cy w h` normalized to 0..1, w and h above 0; the class among `names` (when
    the data has names), else any id >= 0 (checked against the model's classes later)."""
    parts = line.split()
    try:
        values = [float(v) for v in parts]
    except ValueError:
        values = []
    if len(values) != 5 or not all(math.isfinite(v) for v in values) or values[0] != int(values[0]):
        raise UsageError(f"{where}: expected `class cx cy w h`, got {_show(line.strip())}")
    cls = int(values[0])
    if cls < 0 or (names and cls not in names):
        raise UsageError(f"{where}: class {cls} is out of range (the data has {len(names)} classes: "
                         f"0..{max(names)})" if names else f"{where}: class {cls} is negative")
    if not all(0.0 <= v <= 1.0 for v in values[1:]) or values[3] <= 0 or values[4] <= 0:
        raise UsageError(f"{where}: expected cx cy w h normalized to 0..1 (w, h above 0), got "
                         f"{_show(line.strip())}")
    return (cls, values[1], values[2], values[3], values[4])


def yaml_names(value: object, where: str) -> Dict[int, str]:
    """A data.yaml's `names`: a list of names, or a mapping of class index to name."""
    if isinstance(value, list):
        value = dict(enumerate(value))
    if not isinstance(value, dict) or not value:
        raise UsageError(f"{where}: names: expected a list of class names or a mapping of class "
                         f"index to name, got {_show(value)}")
    if len(value) > MAX_CLASSES:
        raise UsageError(f"{where}: names: {len(value)} classes; at most {MAX_CLASSES} are supported")
    out: Dict[int, str] = {}
    for k, v in value.items():
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < 2 ** 31:
            raise UsageError(f"{where}: names: expected class indexes 0, 1, ..., got {_show(k)}")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)) or not str(v).strip():
            raise UsageError(f"{where}: names[{k}]: expected a non-empty string, got {_show(v)}")
        out[k] = str(v).strip()
    return dict(sorted(out.items()))
