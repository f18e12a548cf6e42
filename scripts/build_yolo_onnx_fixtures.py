#!/usr/bin/env python3
"""Build tests/fixtures/yolo_onnx/ and the shipped shapes detector: Ultralytics ONNX exports of
small YOLO nets trained on drawn shapes, a labelled held-out set (Ultralytics layout and COCO
JSON), unlabelled calibration photos, Ultralytics' own full-integer int8 export, and the mAPs
Ultralytics' `val` measures for each.

Run ONCE, by hand, in the venv of scripts/build_yolo_fixtures.py (its docstring has the recipe:
torch 2.14.1, ultralytics 8.4.190, TensorFlow 2.19.1, onnx2tf 1.28.8 --no-deps). The test suite
needs none of these tools; it reads only what this script commits:

    . /work/yolo-venv/bin/activate
    nice -n 10 python scripts/build_yolo_onnx_fixtures.py --work /work/yolo-build-onnx

Stages (``--stage``, default all): ``data`` (training set, held-out set, calibration photos,
sample images), ``train`` (within a time budget), ``more`` (YOLO11 and YOLOv5u again from their
first run's last.pt: on shared cores their first budget only passed the warm-up), ``export``
(ONNX of each net, int8 TFLite of YOLOv8), ``val``
(reference_metrics.json), ``ship`` (models/shapes_yolov8_int8.tflite + models/samples_shapes/).
The drawn-shapes generator and the quirks (YOLO_OFFLINE, settings sync=False, plots=False, the
onnx2tf sample .npy stand-in) are build_yolo_fixtures.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_yolo_fixtures import (  # noqa: E402 - the shared generator and quirks
    ARCHS,
    NAMES,
    _background,
    draw_shapes,
    make_data,
    write_stand_in,
)

os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "False")
os.environ.setdefault("YOLO_VERBOSE", "False")

ROOT = Path(__file__).resolve().parent.parent
IMGSZ = 256
SEED = 0
OPSET = 17
WIDTH, MAX_CHANNELS = 0.125, 512  # 0.6 M parameters for YOLOv8: its float ONNX stays < 3 MB
# a time budget (hours), not epochs: Ultralytics fits its schedule (and close_mosaic) into it;
# on 2 cores shared with other jobs one epoch of YOLOv8 took 90-190 s. nbs=16 (no gradient
# accumulation): an optimizer step per batch, not per 64 images, as few epochs need. The other
# two only need to be YOLO-shaped exports.
HOURS = {"yolov8": 0.55, "yolo11": 0.3, "yolov5u": 0.3}
FRACTION = {"yolov8": 1.0, "yolo11": 0.5, "yolov5u": 0.5}
MORE_HOURS = {"yolo11": 0.2, "yolov5u": 0.2}
N_TRAIN, N_VAL = 600, 100  # the training run's own split (its val picks best.pt, calibrates int8)
# held-out sizes (w, h): landscape, square, portrait, odd
SIZES = [(320, 240), (256, 256), (400, 300), (240, 320), (300, 400), (352, 288), (333, 251)]
N_HELD_OUT, N_EMPTY, N_CALIB = 84, 6, 64
COCO_IDS = {"triangle": 1, "circle": 3, "square": 7}  # COCO-style gaps, NOT in class-index order
JPEG = 85


def _jpeg(path: Path, rgb: np.ndarray) -> None:
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, JPEG])


def make_held_out(dest: Path) -> list:
    """The labelled held-out set (seed of its own, never trained on): Ultralytics layout, an image
    without objects has no label file. Returns the truth [(stem, w, h, [(cls, x1, y1, x2, y2)])]."""
    rng = np.random.default_rng(4242)
    empty = set(rng.choice(N_HELD_OUT, N_EMPTY, replace=False).tolist())
    truth = []
    for i in range(N_HELD_OUT):
        w, h = SIZES[i % len(SIZES)]
        noise = float(rng.uniform(2, 8))
        if i in empty:
            img, boxes = _background(rng, w, h, noise), []
        else:
            img, boxes = draw_shapes(rng, w, h, noise, most=6)
        stem = f"{i + 1:04d}"
        _jpeg(dest / "images" / f"{stem}.jpg", img)
        if boxes:
            lines = [f"{c} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} "
                     f"{(y2 - y1) / h:.6f}" for c, x1, y1, x2, y2 in boxes]
            (dest / "labels").mkdir(parents=True, exist_ok=True)
            (dest / "labels" / f"{stem}.txt").write_text("\n".join(lines) + "\n")
        truth.append((stem, w, h, boxes))
    (dest / "data.yaml").write_text(
        "# Ultralytics layout. Ultralytics resolves a relative `path` against the current folder,\n"
        "# not this file's: run its val from here or give an absolute path.\n"
        "path: .\nval: images\nnames:\n" + "".join(f"  {k}: {v}\n" for k, v in NAMES.items()))
    write_coco(dest / "instances_val.json", truth)
    return truth


def write_coco(path: Path, truth: list) -> None:
    """The same boxes as COCO instances: image id = int(file stem) (as Ultralytics' val names
    images), file_name relative to this JSON's folder, category ids with gaps, matched by name."""
    images, anns = [], []
    for stem, w, h, boxes in truth:
        images.append({"id": int(stem), "file_name": f"images/{stem}.jpg", "width": w, "height": h})
        for c, x1, y1, x2, y2 in boxes:
            bw, bh = x2 - x1, y2 - y1
            anns.append({"id": len(anns) + 1, "image_id": int(stem),
                         "category_id": COCO_IDS[NAMES[c]], "bbox": [x1, y1, bw, bh],
                         "area": bw * bh, "iscrowd": 0})
    cats = [{"id": i, "name": n, "supercategory": "shape"} for n, i in sorted(COCO_IDS.items(),
                                                                              key=lambda t: t[1])]
    path.write_text(json.dumps({"info": {"description": "drawn shapes, held-out set of "
                                         "scripts/build_yolo_onnx_fixtures.py"},
                                "images": images, "annotations": anns, "categories": cats}) + "\n")


def make_unlabelled(dest: Path, count: int, seed: int, most: int = 6, sizes=SIZES) -> None:
    rng = np.random.default_rng(seed)
    for i in range(count):
        w, h = sizes[i % len(sizes)]
        img, _ = draw_shapes(rng, w, h, float(rng.uniform(2, 8)), most=most)
        _jpeg(dest / f"{i + 1:04d}.jpg", img)


def make_all_data(work: Path, out: Path) -> None:
    data = make_data(work, out, n_train=N_TRAIN, n_val=N_VAL)  # seed 21, 256x256, noise 5-25
    print("training set", data)
    make_held_out(out / "shapes_val")
    make_unlabelled(out / "shapes_calib", N_CALIB, seed=777)
    make_unlabelled(work / "samples", 4, seed=99, most=4,
                    sizes=[(320, 240), (256, 256), (240, 320), (400, 300)])


# ----------------------------------------------------------------------------- train


def model_yaml(work: Path, arch: str) -> Path:
    import ultralytics
    import yaml

    rel, depth = ARCHS[arch]
    cfg = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg" / "models" / rel).read_text())
    cfg["nc"] = len(NAMES)
    cfg["scales"] = {"n": [depth, WIDTH, MAX_CHANNELS]}
    cfg["scale"] = "n"
    path = work / f"{arch}-shapes.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def best_pt(work: Path, arch: str) -> Path:
    """The last run's best checkpoint (a second run, MORE, continues a first that fell short)."""
    more = work / "runs" / f"{arch}_more" / "weights" / "best.pt"
    return more if more.exists() else work / "runs" / arch / "weights" / "best.pt"


def train(work: Path, arch: str, more: bool = False) -> dict:
    """Train from the yaml within HOURS[arch]; with more, a second run of MORE_HOURS[arch] from
    the first run's last.pt (YOLO11 and YOLOv5u learnt nothing in their first budget on the
    shared cores: they only passed their warm-up)."""
    from ultralytics import YOLO

    start = time.time()
    name = f"{arch}_more" if more else arch
    init = work / "runs" / arch / "weights" / "last.pt" if more else model_yaml(work, arch)
    hours, fraction = (MORE_HOURS[arch], 1.0) if more else (HOURS[arch], FRACTION[arch])
    model = YOLO(str(init), task="detect")
    model.train(data=str(work / "shapes.yaml"), imgsz=IMGSZ, epochs=100, time=hours,
                fraction=fraction, batch=16, workers=2,
                device="cpu", plots=False, amp=False, seed=SEED, deterministic=True,
                project=str(work / "runs"), name=name, exist_ok=True, verbose=False,
                patience=1000, close_mosaic=3, nbs=16, warmup_epochs=0 if more else 1, mosaic=0.7,
                scale=0.5, degrees=0.0, fliplr=0.5, cache=True)
    epochs = len((work / "runs" / name / "results.csv").read_text().strip().splitlines()) - 1
    rec = {"arch": arch, "epochs": epochs, "hours_budget": hours, "train_fraction": fraction,
           "train_images": int(N_TRAIN * fraction), "seconds": round(time.time() - start),
           "width": WIDTH, "max_channels": MAX_CHANNELS, "depth": ARCHS[arch][1],
           "params": sum(p.numel() for p in model.model.parameters())}
    if more:
        rec = {"first": json.loads((work / f"train_{arch}.json").read_text()), "more": rec}
    (work / f"train_{name}.json").write_text(json.dumps(rec, indent=1))
    return rec


# ----------------------------------------------------------------------------- export


def export_onnx(work: Path, arch: str, out: Path) -> Path:
    from ultralytics import YOLO

    f = YOLO(str(best_pt(work, arch))).export(format="onnx", imgsz=IMGSZ, dynamic=False,
                                              simplify=True, opset=OPSET)
    dest = out / f"{arch}_shapes_{IMGSZ}.onnx"
    shutil.copyfile(f, dest)
    return dest


def export_int8(work: Path, out: Path) -> Path:
    """Ultralytics' own full-integer export, calibrated as it does (the training data's val).
    format="edgetpu" up to the compiler (absent here), as build_yolo_fixtures.export_edgetpu:
    in 8.4 format="tflite" means its litert path (litert_torch), and only the edgetpu path
    applies tf_wrapper (boxes normalized by the input size, the Edge TPU's layout)."""
    from ultralytics import YOLO

    best = best_pt(work, "yolov8")
    try:
        YOLO(str(best)).export(format="edgetpu", imgsz=IMGSZ, data=str(work / "shapes.yaml"))
    except Exception as e:  # noqa: BLE001 - expected: no edgetpu_compiler on this machine
        print(f"edgetpu export stopped at the compiler, as expected: {type(e).__name__}: {e}")
    src = best.parent / f"{best.stem}_saved_model" / f"{best.stem}_full_integer_quant.tflite"
    dest = out / f"yolov8_shapes_{IMGSZ}_full_integer_quant.tflite"
    shutil.copyfile(src, dest)
    return dest


# ----------------------------------------------------------------------------- val


def val_metrics(model_file: Path, data_yaml: Path) -> dict:
    from ultralytics import YOLO

    m = YOLO(str(model_file), task="detect").val(data=str(data_yaml), imgsz=IMGSZ, batch=1,
                                                 plots=False, verbose=False, device="cpu")
    return {"map": round(float(m.box.map), 4), "map50": round(float(m.box.map50), 4),
            "per_class_map": {NAMES[int(c)]: round(float(v), 4)
                              for c, v in zip(m.ap_class_index, m.box.maps[m.ap_class_index])}}


def best_train_record(work: Path, arch: str) -> Path:
    more = work / f"train_{arch}_more.json"
    return more if more.exists() else work / f"train_{arch}.json"


def write_metrics(work: Path, out: Path, archs: list) -> None:
    """Ultralytics' val of each model of archs, merged into reference_metrics.json."""
    import onnx
    import onnx2tf
    import onnxruntime
    import tensorflow
    import torch
    import ultralytics

    data_yaml = work / "held_out.yaml"  # the committed data.yaml, absolute, with the train key
    data_yaml.write_text(f"path: {out / 'shapes_val'}\ntrain: images\nval: images\nnames:\n"  # it wants
                         + "".join(f"  {k}: {v}\n" for k, v in NAMES.items()))
    models = {f"{a}_pytorch": best_pt(work, a) for a in archs}
    models.update({f"{a}_onnx": out / f"{a}_shapes_{IMGSZ}.onnx" for a in archs})
    if "yolov8" in archs:
        models["yolov8_int8_tflite"] = out / f"yolov8_shapes_{IMGSZ}_full_integer_quant.tflite"
    old = out / "reference_metrics.json"
    old = json.loads(old.read_text()) if old.exists() else {}
    rec = {"data": "shapes_val/data.yaml (held-out: never trained on, nor calibrated on)",
           "how": "ultralytics YOLO(model).val(data, imgsz=%d, batch=1): conf 0.001, iou 0.7, "
                  "its default (the .pt validates with rect batches, the exports at the "
                  "square static size)" % IMGSZ,
           "imgsz": IMGSZ, "seed": SEED, "versions": {
               "ultralytics": ultralytics.__version__, "torch": torch.__version__,
               "tensorflow": tensorflow.__version__, "onnx2tf": onnx2tf.__version__,
               "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "python": sys.version.split()[0]},
           "training": {a: json.loads(best_train_record(work, a).read_text())
                        for a in ARCHS if best_train_record(work, a).exists()},
           "models": old.get("models", {})}
    for key, f in models.items():
        if f.exists():
            rec["models"][key] = {"file": f.name if f.parent == out else
                                  f"{f.parent.parent.name}/weights/best.pt (not committed)",
                                  **val_metrics(f, data_yaml)}
            print(key, rec["models"][key], flush=True)
    (out / "reference_metrics.json").write_text(json.dumps(rec, indent=1) + "\n")
    (out / "shapes_val" / "labels.cache").unlink(missing_ok=True)  # Ultralytics' val writes it


def ship(work: Path, out: Path) -> None:
    """The README's offline detector: Ultralytics' full-integer YOLOv8 and sample photos. The
    committed models/shapes_yolov8_int8.tflite is then replaced by edgeapp's own conversion of
    the ONNX export, with its sidecar (the command: tests/fixtures/yolo_onnx/README.md)."""
    models = ROOT / "models"
    shutil.copyfile(out / f"yolov8_shapes_{IMGSZ}_full_integer_quant.tflite",
                    models / "shapes_yolov8_int8.tflite")
    (models / "samples_shapes").mkdir(exist_ok=True)
    for f in sorted((work / "samples").glob("*.jpg")):
        shutil.copyfile(f, models / "samples_shapes" / f"shapes_{f.name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/work/yolo-build-onnx"))
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "yolo_onnx")
    ap.add_argument("--stage", choices=["all", "data", "train", "more", "export", "val", "ship"],
                    default="all")
    ap.add_argument("--arch", nargs="*", default=list(ARCHS))
    args = ap.parse_args()
    work, out = args.work.resolve(), args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YOLO_CONFIG_DIR", str(work / "config"))
    os.chdir(work)  # onnx2tf and Ultralytics write beside the working folder
    from ultralytics import settings

    settings.update(sync=False)
    if args.stage in ("all", "data"):
        make_all_data(work, out)
    if args.stage in ("all", "train"):
        for arch in args.arch:
            print("trained", train(work, arch), flush=True)
    if args.stage in ("all", "more"):
        for arch in (a for a in args.arch if a in MORE_HOURS):
            print("trained more", train(work, arch, more=True), flush=True)
    if args.stage in ("all", "export"):
        write_stand_in(work)
        for arch in args.arch:
            print("exported", export_onnx(work, arch, out), flush=True)
        if "yolov8" in args.arch:
            print("exported", export_int8(work, out), flush=True)
    if args.stage in ("all", "val"):
        write_metrics(work, out, args.arch)
    if args.stage in ("all", "ship"):
        ship(work, out)


if __name__ == "__main__":
    main()
