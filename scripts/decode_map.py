#!/usr/bin/env python3
"""Detection mAP with `--decode scaled` and `--decode full` on camera-sized copies of a labelled
set (pycocotools computes the metric).

    python scripts/decode_map.py [--model models/shapes_yolov8_int8.tflite]
                                 [--set tests/fixtures/yolo_onnx/shapes_val] [--factor 6]

The held-out shapes set's JPEGs (0.06-0.12 MP) are too small for a 256 input to decode at a
reduced scale, so each is enlarged `--factor` times (BICUBIC, JPEG quality 90: 1.9-4.4 MP at
6), run through edgeapp's API both ways at Ultralytics' validation settings (threshold 0.001,
max_det 300), and the boxes, divided by the factor, are scored against the set's COCO JSON.
An enlarged drawing is smoother than a photo: this measures what the scale does to the
boxes, not a camera's detail.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def enlarge(images: dict, folder: Path, factor: int) -> dict:
    from PIL import Image

    out = {}
    for image_id, path in images.items():
        img = Image.open(path).convert("RGB")
        big = img.resize((img.width * factor, img.height * factor), Image.BICUBIC)
        p = folder / Path(path).name
        big.save(p, quality=90)
        out[image_id] = str(p)
    return out


def detections(model: Path, images: dict, decode: str, factor: int, categories: dict) -> list:
    import edgeapp

    found = []
    with edgeapp.open_model(model, "cpu", task="detect", decode=decode, threshold=0.001,
                            max_det=300) as m:
        ids = list(images)
        for image_id, record in zip(ids, m.batch([images[i] for i in ids])):
            for o in record["objects"]:
                x0, y0, x1, y1 = (v / factor for v in o["bbox"])
                found.append({"image_id": image_id, "category_id": categories[o["label"]],
                              "bbox": [x0, y0, x1 - x0, y1 - y0], "score": o["score"]})
    return found


def coco_map(truth: Path, found: list) -> tuple:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(truth))
        dt = gt.loadRes(found) if found else None
        e = COCOeval(gt, dt, "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    return round(float(e.stats[0]), 4), round(float(e.stats[1]), 4)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "shapes_yolov8_int8.tflite")
    ap.add_argument("--set", type=Path, default=ROOT / "tests" / "fixtures" / "yolo_onnx" / "shapes_val")
    ap.add_argument("--factor", type=int, default=6)
    args = ap.parse_args(argv)
    truth = args.set / "instances_val.json"
    doc = json.loads(truth.read_text())
    categories = {c["name"]: c["id"] for c in doc["categories"]}
    images = {im["id"]: str(args.set / im["file_name"]) for im in doc["images"]}
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        big = enlarge(images, Path(tmp), args.factor)
        for decode in ("full", "scaled"):
            mapx, map50 = coco_map(truth, detections(args.model, big, decode, args.factor, categories))
            result[decode] = {"mAP50-95": mapx, "mAP50": map50}
    print(json.dumps({"model": str(args.model), "images": len(images), "factor": args.factor,
                      **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
