#!/usr/bin/env python3
"""Build the YOLO test fixtures under tests/fixtures/yolo/: small trained YOLO models exported
for the Edge TPU, held-out images, and Ultralytics' own detections of each file on them.

Run ONCE, by hand, in its own virtual environment OUTSIDE the repo (the test suite needs none
of these tools; it reads only what this script commits). The recipe that worked (x86_64,
Python 3.11, pip takes torch/torchvision from this machine's disk):

    python3 -m venv /work/yolo-venv && . /work/yolo-venv/bin/activate
    pip install -U pip
    pip install torch==2.14.1 torchvision==0.29.1        # 0.28 from the registry: CUDA build, no import
    pip install ultralytics==8.4.190 tensorflow==2.19.1 onnx onnxslim sng4onnx onnx-graphsurgeon
    pip install 'numpy==2.1.3' 'tf_keras==2.19.0' ai-edge-litert onnxruntime 'protobuf>=5,<6'
    pip install --no-deps 'onnx2tf>=1.26.3,<1.29'        # the exporter's own pin; --no-deps as it does
    nice -n 10 python scripts/build_yolo_fixtures.py --work /work/yolo-build --out tests/fixtures/yolo

Stages (``--stage``, default all): ``data`` (synthetic shapes dataset + held-out images),
``train`` (YOLOv8/YOLO11/YOLOv5u at width multiple 0.125), ``export`` (format="edgetpu" up to
the compiler, which is absent here: its ``*_full_integer_quant.tflite`` is kept; plus the split-DFL
and classic-YOLOv5 layouts made from the same trained nets), ``record`` (reference detections).

Quirks met (Ultralytics 8.4.190, onnx2tf 1.28.8), see README.md in the fixtures folder too:
  * YOLO_OFFLINE=1, YOLO_AUTOINSTALL=False and settings sync=False, else it tries the network;
    plots=False in training (plots download a font).
  * onnx2tf wants calibration_image_sample_data_20x128x128x3_float32.npy in the working folder
    and cannot download it: a stand-in is written there (Ultralytics passes its own images).
  * format="edgetpu" writes *_saved_model/*_full_integer_quant.tflite, then looks for
    edgetpu_compiler; with YOLO_AUTOINSTALL=False that raises: the export is caught and the
    full-integer file taken from the saved-model folder.
  * Ultralytics' predictor quantizes its input with astype(int8), truncating; the reference here
    rounds to nearest (the documented TFLite rule) and runs the interpreter itself, then feeds the
    dequantized outputs to Ultralytics' own NMS and scale_boxes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "False")
os.environ.setdefault("YOLO_VERBOSE", "False")

NAMES = {0: "circle", 1: "square", 2: "triangle"}
ARCHS = {  # name: (Ultralytics model yaml, depth multiple of its "n" scale)
    "yolov8": ("v8/yolov8.yaml", 0.33),
    "yolo11": ("11/yolo11.yaml", 0.50),
    "yolov5u": ("v5/yolov5.yaml", 0.33),
}
WIDTH = 0.125  # the "n" width is 0.25: half of it keeps the models under 1 M parameters
HELD_OUT = [("a_256x256", 256, 256), ("b_320x240", 320, 240), ("c_200x300", 200, 300),
            ("d_333x251", 333, 251)]  # (name, width, height): odd sizes exercise the padding split
CONF, IOU, MAX_DET = 0.25, 0.7, 300


# ----------------------------------------------------------------------------- data


def _background(rng: np.random.Generator, w: int, h: int, noise: float) -> np.ndarray:
    base = rng.integers(30, 226, size=3).astype(np.float32)
    gx = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    gy = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    tilt = rng.uniform(-40, 40, size=(2, 3)).astype(np.float32)
    img = base + gx * tilt[0] + gy * tilt[1] + rng.normal(0, noise, size=(h, w, 3)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def _colour(rng: np.random.Generator, bg: np.ndarray) -> tuple:
    while True:
        c = rng.integers(0, 256, size=3)
        if np.abs(c - bg).sum() > 150:
            return tuple(int(v) for v in c)


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def draw_shapes(rng: np.random.Generator, w: int, h: int, noise: float, most: int = 4):
    """An RGB image with 1..most shapes and their boxes [(cls, x1, y1, x2, y2)] in pixels."""
    import cv2

    img = _background(rng, w, h, noise)
    boxes = []
    for _ in range(int(rng.integers(1, most + 1))):
        for _try in range(20):
            s = int(rng.integers(max(16, min(w, h) // 12), min(w, h) // 2.5))
            x1, y1 = int(rng.integers(0, w - s)), int(rng.integers(0, h - s))
            box = (x1, y1, x1 + s, y1 + s)
            if all(_iou(box, b[1:]) < 0.05 for b in boxes):
                break
        else:
            continue
        cls = int(rng.integers(0, 3))
        bg = img[min(h - 1, y1 + s // 2), min(w - 1, x1 + s // 2)].astype(int)
        col = _colour(rng, bg)
        if cls == 0:
            cv2.circle(img, (x1 + s // 2, y1 + s // 2), s // 2, col, -1, cv2.LINE_AA)
            box = (x1, y1, x1 + 2 * (s // 2), y1 + 2 * (s // 2))
        elif cls == 1:
            cv2.rectangle(img, (x1, y1), (x1 + s - 1, y1 + s - 1), col, -1)
        else:
            pts = np.array([[x1 + s // 2, y1], [x1, y1 + s - 1], [x1 + s - 1, y1 + s - 1]], np.int32)
            cv2.fillPoly(img, [pts], col, cv2.LINE_AA)
        boxes.append((cls,) + tuple(float(v) for v in box))
    return img, boxes


def make_data(work: Path, out: Path, n_train: int = 400, n_val: int = 80) -> Path:
    """The training set: 256x256 JPEGs with 1-4 shapes each, labels in YOLO's text format."""
    import cv2

    rng = np.random.default_rng(21)
    root = work / "shapes"
    for split, n in (("train", n_train), ("val", n_val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img, boxes = draw_shapes(rng, 256, 256, float(rng.uniform(5, 25)))
            cv2.imwrite(str(root / "images" / split / f"{i:04d}.jpg"), img[:, :, ::-1],
                        [cv2.IMWRITE_JPEG_QUALITY, 92])
            lines = [f"{c} {(x1 + x2) / 512:.6f} {(y1 + y2) / 512:.6f} {(x2 - x1) / 256:.6f} "
                     f"{(y2 - y1) / 256:.6f}" for c, x1, y1, x2, y2 in boxes]
            (root / "labels" / split / f"{i:04d}.txt").write_text("\n".join(lines) + "\n")
    data = work / "shapes.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n"
                    + "".join(f"  {k}: {v}\n" for k, v in NAMES.items()))
    return data


def make_held_out(work: Path, out: Path) -> None:
    """A few images of other sizes (odd ones exercise the padding split), 3-7 shapes each."""
    import cv2

    rng = np.random.default_rng(2121)
    (out / "images").mkdir(parents=True, exist_ok=True)
    truth = {}
    for name, w, h in HELD_OUT:  # PNG: lossless, so every decoder sees the same pixels
        boxes = []
        while len(boxes) < 3:
            img, boxes = draw_shapes(rng, w, h, 4.0, most=7)
        cv2.imwrite(str(out / "images" / f"{name}.png"), img[:, :, ::-1],
                    [cv2.IMWRITE_PNG_COMPRESSION, 9])
        truth[name] = [{"class": c, "box": list(b)} for c, *b in boxes]
    (work / "held_out_truth.json").write_text(json.dumps(truth, indent=1))


# ----------------------------------------------------------------------------- train


def model_yaml(work: Path, arch: str) -> Path:
    import ultralytics
    import yaml

    rel, depth = ARCHS[arch]
    cfg = yaml.safe_load((Path(ultralytics.__file__).parent / "cfg" / "models" / rel).read_text())
    cfg["nc"] = len(NAMES)
    cfg["scales"] = {"n": [depth, WIDTH, 1024]}
    cfg["scale"] = "n"
    path = work / f"{arch}-w0125.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def train(work: Path, data: Path, arch: str, epochs: int) -> Path:
    from ultralytics import YOLO

    model = YOLO(str(model_yaml(work, arch)), task="detect")
    model.train(data=str(data), imgsz=256, epochs=epochs, batch=16, workers=2, device="cpu",
                plots=False, amp=False, seed=0, deterministic=True, project=str(work / "runs"),
                name=arch, exist_ok=True, verbose=False, patience=1000, close_mosaic=5,
                mosaic=0.5, degrees=0.0, fliplr=0.5, cache=True)
    return work / "runs" / arch / "weights" / "best.pt"


# ----------------------------------------------------------------------------- export


STAND_IN = "calibration_image_sample_data_20x128x128x3_float32.npy"


def write_stand_in(work: Path) -> None:
    """onnx2tf's sample file, which it cannot download here (only used without custom data)."""
    path = work / STAND_IN
    if not path.exists():
        np.save(path, np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32))


def export_edgetpu(best: Path, imgsz: int, data: Path, dest: Path) -> Path:
    """format="edgetpu" up to the compiler; the full-integer .tflite it compiles is kept."""
    from ultralytics import YOLO

    try:
        YOLO(str(best)).export(format="edgetpu", imgsz=imgsz, data=str(data))
        print("edgetpu export finished (a compiler was found)")
    except Exception as e:  # noqa: BLE001 - expected: no edgetpu_compiler on this machine
        print(f"edgetpu export stopped at the compiler, as expected: {type(e).__name__}: {e}")
    src = best.parent / f"{best.stem}_saved_model" / f"{best.stem}_full_integer_quant.tflite"
    shutil.copyfile(src, dest)
    return dest


def load_net(best: Path):
    import torch
    from ultralytics import YOLO

    net = YOLO(str(best)).model.float().eval()
    for p in net.parameters():
        p.requires_grad = False
    return net.fuse(), torch


def run_trunk(net, x):
    """The layers before the head, as DetectionModel._predict_once runs them; returns the head's
    inputs."""
    y = []
    for m in net.model[:-1]:
        if m.f != -1:
            x = y[m.f] if isinstance(m.f, int) else [x if j == -1 else y[j] for j in m.f]
        x = m(x)
        y.append(x if m.i in net.save else None)
    head = net.model[-1]
    return head, [x if j == -1 else y[j] for j in head.f]


def make_dfl_module(net, torch):
    """Frigate's yolo-generic layout from the trained net: raw DFL box logits (1, N, 64) and
    class logits (1, N, nc), decoded on the host."""

    class SplitDFL(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            head, feats = run_trunk(self.net, x)
            preds = head.forward_head(feats, **head.one2many)
            return preds["boxes"].permute(0, 2, 1), preds["scores"].permute(0, 2, 1)

    return SplitDFL().eval()


def make_classic_v5_module(net, torch):
    """The classic YOLOv5 layout (1, 3N, 5 + nc) made from a trained anchor-free net (NOT a real
    anchor-based YOLOv5): per level three slots per cell like YOLOv5's anchors, slot k holding
    the cell's box with objectness = best class score x 0.5**k and class scores divided by the
    best one, so objectness x class = the net's own score for slot 0, lower for its duplicates."""

    class ClassicV5(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            head, feats = run_trunk(self.net, x)
            y = head._inference(head.forward_head(feats, **head.one2many))  # (1, 4 + nc, N)
            box, cls = y[:, :4], y[:, 4:]  # boxes normalized by tf_wrapper's decode
            obj = cls.amax(1, keepdim=True)
            rows = torch.cat((box, obj, cls / obj.clamp(min=1e-3)), 1).permute(0, 2, 1)
            out, start = [], 0
            for f in feats:
                n = f.shape[2] * f.shape[3]
                level = rows[:, start:start + n]
                for k in range(3):
                    out.append(torch.cat((level[..., :4], level[..., 4:5] * 0.5 ** k,
                                          level[..., 5:]), 2))
                start += n
            return torch.cat(out, 1)

    from ultralytics.utils.export.tensorflow import tf_wrapper

    tf_wrapper(net)  # the normalized box decode of Ultralytics' TFLite exports (onnx2tf breaks
    head = net.model[-1]  # the plain one: its boxes came out as zeros)
    head.format, head.dynamic, head.shape = "edgetpu", False, None
    return ClassicV5().eval()


def calibration_images(data_root: Path, imgsz: int, count: int = 64) -> np.ndarray:
    """BHWC float32 0..255 letterboxed val images, as Ultralytics passes onnx2tf."""
    import cv2
    from ultralytics.data.augment import LetterBox

    files = sorted((data_root / "images" / "val").glob("*.jpg"))[:count]
    boxed = [LetterBox((imgsz, imgsz), auto=False)(image=cv2.imread(str(f)))[:, :, ::-1] for f in files]
    return np.stack(boxed).astype(np.float32)


def export_module(module, torch, imgsz: int, work: Path, name: str, dest: Path,
                  output_names: list) -> Path:
    from ultralytics.utils.export.engine import torch2onnx
    from ultralytics.utils.export.tensorflow import onnx2saved_model

    folder = work / f"{name}_saved_model"
    shutil.rmtree(folder, ignore_errors=True)
    onnx_file = work / f"{name}.onnx"
    im = torch.zeros(1, 3, imgsz, imgsz)
    module(im)  # dry run
    torch2onnx(module, im, onnx_file, opset=17, output_names=output_names)
    import onnx
    import onnxslim

    onnx.save(onnxslim.slim(onnx.load(str(onnx_file))), str(onnx_file))  # as Ultralytics does
    images = calibration_images(work / "shapes", imgsz)
    onnx2saved_model(str(onnx_file), folder, quantize=8, images=images,
                     disable_group_convolution=True)
    shutil.copyfile(folder / f"{name}_full_integer_quant.tflite", dest)
    return dest


def export_all(work: Path, out: Path, data: Path, archs: list) -> None:
    write_stand_in(work)
    best = {a: work / "runs" / a / "weights" / "best.pt" for a in archs}
    for arch in archs:
        export_edgetpu(best[arch], 256, data, out / f"{arch}_256_full_integer_quant.tflite")
    if "yolov8" in archs:  # at 320 (N = 2,100): anchors of another size than the others'
        net, torch = load_net(best["yolov8"])
        export_module(make_dfl_module(net, torch), torch, 320, work, "yolov8_dfl_320",
                      out / "yolov8_dfl_320.tflite", ["boxes", "scores"])
    if "yolov5u" in archs:
        net, torch = load_net(best["yolov5u"])
        export_module(make_classic_v5_module(net, torch), torch, 256, work,
                      "yolov5_classic_256", out / "yolov5_classic_256.tflite", ["output0"])


# ----------------------------------------------------------------------------- record


def run_tflite(path: Path, tensor: np.ndarray):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    it.set_tensor(inp["index"], tensor)
    it.invoke()
    details = it.get_output_details()
    return inp, details, [it.get_tensor(d["index"]).copy() for d in details]


def exact_input(image: Path, inp: dict) -> tuple:
    """Ultralytics' preprocessing (cv2.imread, LetterBox auto=False, BGR->RGB, /255) with the
    quantization rounded to nearest instead of its astype truncation."""
    import cv2
    from ultralytics.data.augment import LetterBox

    h, w = (int(d) for d in inp["shape"][1:3])
    bgr = cv2.imread(str(image))
    boxed = LetterBox((h, w), auto=False)(image=bgr)
    x = np.ascontiguousarray(boxed[:, :, ::-1]).astype(np.float32) / np.float32(255)
    scale, zero = inp["quantization"]
    info = np.iinfo(inp["dtype"])
    q = np.clip(np.rint(x / np.float32(scale) + np.float32(zero)), info.min, info.max)
    return q.astype(inp["dtype"])[None], bgr.shape[:2], boxed


def deq(x: np.ndarray, d: dict) -> np.ndarray:
    scale, zero = d["quantization"]
    return (x.astype(np.float32) - zero) * scale if scale else x.astype(np.float32)


def ultralytics_detections(pred, hw: tuple, orig_hw: tuple, nc: int) -> list:
    """Ultralytics' own NMS and scale_boxes on a (1, 4 + nc, N) pixel-xywh prediction."""
    import torch
    import torchvision  # noqa: F401 - non_max_suppression uses torchvision.ops.nms when imported
    from ultralytics.utils import nms, ops

    det = nms.non_max_suppression(torch.from_numpy(np.ascontiguousarray(pred)), CONF, IOU,
                                  max_det=MAX_DET, nc=nc)[0]
    boxes = ops.scale_boxes(hw, det[:, :4].clone(), orig_hw)
    return [{"class": int(c), "score": float(s), "box": [round(float(v), 4) for v in b]}
            for b, s, c in zip(boxes, det[:, 4], det[:, 5])]


def reference(kind: str, details: list, raw: list, hw: tuple, orig_hw: tuple, head) -> list:
    h, w = hw
    if kind == "yolov8":
        y = deq(raw[0], details[0])
        y[:, [0, 2]] *= w  # as Ultralytics' TFLite backends denormalize
        y[:, [1, 3]] *= h
        return ultralytics_detections(y, hw, orig_hw, y.shape[1] - 4)
    if kind == "dfl":  # Ultralytics' own Detect head decode (DFL, anchors, strides, sigmoid)
        import torch

        box_i = next(i for i, d in enumerate(details) if d["shape"][-1] == 64)
        boxes = torch.from_numpy(deq(raw[box_i], details[box_i])).permute(0, 2, 1)
        scores = torch.from_numpy(deq(raw[1 - box_i], details[1 - box_i])).permute(0, 2, 1)
        feats = [torch.zeros(1, 1, h // int(s), w // int(s)) for s in head.stride]
        head.shape = None
        y = head._inference({"boxes": boxes, "scores": scores, "feats": feats}).numpy()
        return ultralytics_detections(y, hw, orig_hw, y.shape[1] - 4)
    # classic YOLOv5: YOLOv5's rule (objectness > conf, then objectness x class), then the same NMS
    y = deq(raw[0], details[0])[0]  # (3N, 5 + nc)
    y[:, :4] *= np.array([w, h, w, h], np.float32)
    cls = y[:, 5:] * y[:, 4:5]
    cls[y[:, 4] <= CONF] = 0
    pred = np.concatenate((y[:, :4], cls), 1).T[None]
    return ultralytics_detections(pred, hw, orig_hw, cls.shape[1])


def ultralytics_predict(model: Path, image: Path, imgsz: int) -> list:
    """What YOLO(model).predict() itself gives (its truncating input quantization), for the note."""
    from ultralytics import YOLO

    r = YOLO(str(model), task="detect").predict(str(image), imgsz=imgsz, conf=CONF, iou=IOU,
                                                verbose=False)[0]
    return [{"class": int(c), "score": round(float(s), 6), "box": [round(float(v), 2) for v in b]}
            for b, s, c in zip(r.boxes.xyxy, r.boxes.conf, r.boxes.cls)]


def letterbox_record(image: Path, size: int) -> dict:
    import cv2
    from ultralytics.data.augment import LetterBox

    bgr = cv2.imread(str(image))
    lb = LetterBox((size, size), auto=False)
    params = lb.get_params({"img": bgr})
    rgb = np.ascontiguousarray(lb(image=bgr)[:, :, ::-1])
    return {"size": size, "new_unpad": list(params["new_unpad"]),
            "top": params["top"], "bottom": params["bottom"], "left": params["left"],
            "right": params["right"], "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()}


MODELS = {  # fixture file: (layout, trained net it came from, embedded Ultralytics metadata)
    "yolov8_256_full_integer_quant.tflite": ("yolov8", "yolov8", True),
    "yolo11_256_full_integer_quant.tflite": ("yolov8", "yolo11", True),
    "yolov5u_256_full_integer_quant.tflite": ("yolov8", "yolov5u", True),
    "yolov8_dfl_320.tflite": ("dfl", "yolov8", False),
    "yolov5_classic_256.tflite": ("yolov5", "yolov5u", False),
}


def record_all(work: Path, out: Path) -> None:
    import cv2
    import torch
    import ultralytics
    from ultralytics.nn.backends.base import BaseBackend

    images = sorted((out / "images").glob("*.png"))
    for name, (kind, arch, has_meta) in MODELS.items():
        path = out / name
        if not path.exists():
            print("missing", path)
            continue
        head = load_net(work / "runs" / arch / "weights" / "best.pt")[0].model[-1] \
            if kind == "dfl" else None  # Ultralytics' own Detect head decodes the DFL outputs
        rec = {"model": name, "layout": kind, "trained": arch, "conf": CONF, "iou": IOU,
               "max_det": MAX_DET, "ultralytics": ultralytics.__version__,
               "torch": torch.__version__, "opencv": cv2.__version__,
               "metadata": BaseBackend.read_metadata(path) if has_meta else None, "images": {}}
        for image in images:
            tensor, orig_hw, _ = exact_input(image, input_details(path))
            inp, details, raw = run_tflite(path, tensor)
            hw = tuple(int(d) for d in inp["shape"][1:3])
            entry = {"orig_hw": list(orig_hw),
                     "input_sha256": hashlib.sha256(tensor.tobytes()).hexdigest(),
                     "detections": reference(kind, details, raw, hw, orig_hw, head)}
            if has_meta:
                entry["ultralytics_predict"] = ultralytics_predict(path, image, hw[0])
            rec["images"][image.name] = entry
        rec["input"] = {"shape": [int(d) for d in inp["shape"]], "dtype": np.dtype(inp["dtype"]).name,
                        "scale": float(inp["quantization"][0]), "zero_point": int(inp["quantization"][1])}
        rec["outputs"] = [{"name": d["name"], "shape": [int(v) for v in d["shape"]],
                           "dtype": np.dtype(d["dtype"]).name, "scale": float(d["quantization"][0]),
                           "zero_point": int(d["quantization"][1])} for d in details]
        (out / (Path(name).stem + ".json")).write_text(json.dumps(rec, indent=1) + "\n")
        print(name, {k: len(v["detections"]) for k, v in rec["images"].items()})
    boxes = {img.name: [letterbox_record(img, s) for s in (256, 320, 640)] for img in images}
    (out / "letterbox.json").write_text(json.dumps(boxes, indent=1) + "\n")


def input_details(path: Path) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path)).get_input_details()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/work/yolo-build"))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" /
                    "fixtures" / "yolo")
    ap.add_argument("--stage", choices=["all", "data", "train", "export", "record"], default="all")
    ap.add_argument("--arch", nargs="*", default=list(ARCHS))
    ap.add_argument("--epochs", type=int, default=50)
    args = ap.parse_args()
    work, out = args.work.resolve(), args.out.resolve()
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("YOLO_CONFIG_DIR", str(work / "config"))
    os.chdir(work)  # onnx2tf and Ultralytics write beside the working folder
    from ultralytics import settings

    settings.update(sync=False)
    data = work / "shapes.yaml"
    if args.stage in ("all", "data"):
        data = make_data(work, out)
        make_held_out(work, out)
    if args.stage in ("all", "train"):
        for arch in args.arch:
            print("trained", train(work, data, arch, args.epochs), flush=True)
    if args.stage in ("all", "export"):
        export_all(work, out, data, args.arch)
    if args.stage in ("all", "record"):
        record_all(work, out)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
