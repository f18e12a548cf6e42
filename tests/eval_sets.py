"""Small labelled sets made by the tests, in the layouts `edgeapp eval` reads.

- shapes: images of drawn circles, squares and triangles (scripts/build_yolo_fixtures.py's own
  drawing, so tests/fixtures/yolo's detectors find them), written as an Ultralytics dataset
  (data.yaml, images/val, labels/val) and as a COCO instances JSON of the same boxes.
- class folders and a CSV of the colour images of tests/conftest.py.
- images/ + masks/ for the stand-in segmentation model (tests/posesegment_models.py).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
NAMES = {0: "circle", 1: "square", 2: "triangle"}


def _builder():
    spec = importlib.util.spec_from_file_location("build_yolo_fixtures",
                                                  ROOT / "scripts" / "build_yolo_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shapes_set(root: Path, count: int = 12, seed: int = 5, sizes=((256, 256), (320, 240))) -> dict:
    """{"yaml", "folder", "coco", "images", "truth"}: the same drawn images and boxes as an
    Ultralytics dataset (data.yaml + images/val + labels/val) and a COCO JSON (ids 101, 102...,
    category ids 1, 2, 3 named as the classes)."""
    import cv2

    draw = _builder().draw_shapes
    rng = np.random.default_rng(seed)
    images, labels = root / "images" / "val", root / "labels" / "val"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    coco = {"images": [], "annotations": [],
            "categories": [{"id": k + 1, "name": v} for k, v in NAMES.items()]}
    truth = {}
    for i in range(count):
        w, h = sizes[i % len(sizes)]
        img, boxes = draw(rng, w, h, 4.0, most=4)
        name = f"{i:04d}.png"
        cv2.imwrite(str(images / name), img[:, :, ::-1])
        lines = [f"{c} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} "
                 f"{(y2 - y1) / h:.6f}" for c, x1, y1, x2, y2 in boxes]
        (labels / f"{i:04d}.txt").write_text("\n".join(lines) + "\n")
        coco["images"].append({"id": 101 + i, "file_name": name, "width": w, "height": h})
        for c, x1, y1, x2, y2 in boxes:
            coco["annotations"].append({"id": len(coco["annotations"]) + 1, "image_id": 101 + i,
                                        "category_id": c + 1, "bbox": [x1, y1, x2 - x1, y2 - y1],
                                        "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
        truth[name] = boxes
    (root / "data.yaml").write_text(f"path: {root}\nval: images/val\nnames:\n"
                                    + "".join(f"  {k}: {v}\n" for k, v in NAMES.items()))
    coco_path = root / "instances.json"
    coco_path.write_text(json.dumps(coco))
    return {"yaml": root / "data.yaml", "coco": coco_path, "images": images, "truth": truth,
            "root": root}


def small_shapes_set(root: Path, count: int = 6, seed: int = 9, size: tuple = (1024, 768),
                     side: tuple = (44, 56), most: int = 6) -> dict:
    """Small objects: shapes 44-56 px on a 1024x768 image (a 256-pixel detector sees them at a
    quarter of that, below the smallest it learnt), written as an Ultralytics dataset:
    {"yaml", "images", "truth"}."""
    import cv2

    build = _builder()
    rng = np.random.default_rng(seed)
    w, h = size
    images, labels = root / "images" / "val", root / "labels" / "val"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    truth = {}
    for i in range(count):
        img = build._background(rng, w, h, 4.0)
        boxes: list = []
        while len(boxes) < most:
            s = int(rng.integers(side[0], side[1] + 1))
            x1, y1 = int(rng.integers(0, w - s)), int(rng.integers(0, h - s))
            if any(build._iou((x1, y1, x1 + s, y1 + s), b[1:]) > 0.0 for b in boxes):
                continue
            cls = int(rng.integers(0, 3))
            col = build._colour(rng, img[y1 + s // 2, x1 + s // 2].astype(int))
            if cls == 0:
                cv2.circle(img, (x1 + s // 2, y1 + s // 2), s // 2, col, -1, cv2.LINE_AA)
                s = 2 * (s // 2)
            elif cls == 1:
                cv2.rectangle(img, (x1, y1), (x1 + s - 1, y1 + s - 1), col, -1)
            else:
                pts = np.array([[x1 + s // 2, y1], [x1, y1 + s - 1], [x1 + s - 1, y1 + s - 1]], np.int32)
                cv2.fillPoly(img, [pts], col, cv2.LINE_AA)
            boxes.append((cls, float(x1), float(y1), float(x1 + s), float(y1 + s)))
        name = f"{i:04d}.png"
        cv2.imwrite(str(images / name), img[:, :, ::-1])
        (labels / f"{i:04d}.txt").write_text("".join(
            f"{c} {(a + b) / 2 / w:.6f} {(y + z) / 2 / h:.6f} {(b - a) / w:.6f} {(z - y) / h:.6f}\n"
            for c, a, y, b, z in boxes))
        truth[name] = boxes
    (root / "data.yaml").write_text(f"path: {root}\nval: images/val\nnames:\n"
                                    + "".join(f"  {k}: {v}\n" for k, v in NAMES.items()))
    return {"yaml": root / "data.yaml", "images": images, "truth": truth}


def masks_set(root: Path, count: int = 4, size: int = 40) -> Path:
    """images/ and masks/ for the stand-in segmenter: quadrants of red, green, blue, black with
    their class ids (1, 2, 3, 0), a band of 255 (ignore) across the middle."""
    from PIL import Image
    from posesegment_models import quadrants

    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i in range(count):
        img = quadrants((size + 8 * i, size))
        w, h = size + 8 * i, size
        mask = np.zeros((h, w), np.uint8)
        mask[:h // 2, :w // 2], mask[:h // 2, w // 2:] = 1, 2
        mask[h // 2:, :w // 2], mask[h // 2:, w // 2:] = 3, 0
        mask[h // 2 - 1:h // 2 + 1] = 255
        Image.fromarray(img).save(root / "images" / f"q{i}.png")
        Image.fromarray(mask).save(root / "masks" / f"q{i}.png")
    return root
