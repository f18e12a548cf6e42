#!/usr/bin/env python3
"""ONNX → int8 TFLite: `edgeapp convert` against plain onnx2tf full-integer quantization.

Measures, per ONNX model of the bench set (scripts/build_onnx_fixtures.py --bench DIR): wall
time, float (ONNX Runtime) vs int8 agreement on held-out photos (logit cosine mean/min, SQNR,
top-1 agreement; top-1 accuracy for the digits CNN, whose held-out images have class folders),
and edgeapp's `check` verdict, for
  * edgeapp: `edgeapp convert M.onnx -c photos --mean 0 --std 255` (its own held-out split is
    not used here: every converter is scored on the same held-out images);
  * onnx2tf -oiqt -cind: onnx2tf 1.28.8's own full-integer quantization, calibrated on the same
    images with the same normalization (its best case);
  * onnx2tf -oiqt: onnx2tf's default calibration (its 20 sample images, normalized with
    ImageNet's mean/std), with the sample file seeded from the same photos (no network here).
Run in the edgeapp venv with the onnx extra:
    python scripts/bench_onnx_convert.py /work/onnx-bench [--models mobilenet_v2 resnet18 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
N_CAL, N_VAL = 100, 50


def photos(bench: Path) -> tuple:
    files = sorted((bench / "photos").glob("*.jpg"))
    return files[:N_CAL], files[N_CAL:N_CAL + N_VAL]


def digits(bench: Path) -> tuple:
    files = sorted((bench / "digits_val").glob("*/*.png"))
    rng = np.random.default_rng(0)
    order = rng.permutation(len(files))
    return [files[i] for i in order[:150]], [files[i] for i in order[150:]]


def pixels(files: list, size: int) -> np.ndarray:
    from PIL import Image

    return np.stack([np.asarray(Image.open(f).convert("RGB").resize((size, size), Image.LANCZOS), np.float32)
                     for f in files]) / 255.0


def ort_logits(model: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    s = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i:i + 1].transpose(0, 3, 1, 2)})[0] for i in range(len(x))])


def tflite_logits(model: Path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model))
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    outs = []
    for v in x:
        scale, zero = i["quantization"]
        if i["dtype"] in (np.uint8, np.int8):
            info = np.iinfo(i["dtype"])
            v = np.clip(np.rint(v / scale + zero), info.min, info.max).astype(i["dtype"])
        it.set_tensor(i["index"], v[None].astype(i["dtype"]))
        it.invoke()
        raw = it.get_tensor(o["index"]).astype(np.float32)
        s, z = o["quantization"]
        outs.append((raw - z) * s if s else raw)
    return np.concatenate(outs).reshape(len(x), -1)


def scores(ref: np.ndarray, got: np.ndarray, labels=None) -> dict:
    from edgeapp.core.quant.metrics import cosine_per_sample, sqnr_db

    cos = cosine_per_sample(ref, got)
    agree = float(np.mean(ref.argmax(1) == got.argmax(1)))
    out = {"cosine_mean": round(float(cos.mean()), 4), "cosine_min": round(float(cos.min()), 4),
           "sqnr_db": round(sqnr_db(ref, got), 2), "top1_agreement": round(agree, 4)}
    if labels is not None:
        out["float_top1"] = round(float(np.mean(ref.argmax(1) == labels)), 4)
        out["int8_top1"] = round(float(np.mean(got.argmax(1) == labels)), 4)
    return out


def verdict(model: Path) -> str:
    from edgeapp.flows.check import check_file

    s = check_file(model).summary
    return f"{s['verdict']} {s['ops_tpu']}/{s['ops_total']}"


def run_edgeapp(model: Path, cal_dir: Path, out: Path) -> tuple:
    t = time.time()
    proc = subprocess.run([sys.executable, "-m", "edgeapp", "convert", str(model), "-o", str(out), "-c", str(cal_dir),
                           "--mean", "0", "--std", "255", "--val", "0", "--calibration-size", str(N_CAL),
                           "--format", "json"], capture_output=True, text=True)
    if proc.returncode:
        return None, time.time() - t, proc.stderr.strip().splitlines()[-1]
    return out, time.time() - t, None


ONNX2TF_CODE = """
import os, sys, numpy as np, onnx2tf
os.chdir(sys.argv[3])
kw = dict(input_onnx_file_path=sys.argv[1], output_folder_path=sys.argv[2], output_integer_quantized_tflite=True,
          non_verbose=True, not_use_onnxsim=True)
if sys.argv[4] != "-":
    kw["custom_input_op_name_np_data_path"] = [["input", sys.argv[4], np.zeros((1, 1, 1, 3), np.float32),
                                                 np.ones((1, 1, 1, 3), np.float32)]]
onnx2tf.convert(**kw)
"""


def run_onnx2tf(model: Path, cal: np.ndarray, work: Path, custom: bool) -> tuple:
    work.mkdir(parents=True, exist_ok=True)
    sample = cal[:20]
    import tensorflow as tf

    seeded = tf.image.resize(np.resize(sample, (20, *sample.shape[1:])), (128, 128)).numpy().astype(np.float32)
    np.save(work / "calibration_image_sample_data_20x128x128x3_float32.npy", seeded)
    npy = "-"
    if custom:
        npy = str(work / "cal.npy")
        np.save(npy, cal.astype(np.float32))
    t = time.time()
    proc = subprocess.run([sys.executable, "-c", ONNX2TF_CODE, str(model), str(work / "out"), str(work), npy],
                          capture_output=True, text=True)
    found = list((work / "out").glob("*_full_integer_quant.tflite"))
    if proc.returncode or not found:
        return None, time.time() - t, (proc.stdout + proc.stderr).strip().splitlines()[-1:]
    return found[0], time.time() - t, None


def bench_model(bench: Path, name: str, out: Path, only=None) -> dict:
    model = bench / f"{name}.onnx"
    if name == "digits_cnn":
        cal_files, val_files = digits(bench)
        labels = np.array([int(f.parent.name) for f in val_files])
        size = 32
    else:
        cal_files, val_files = photos(bench)
        labels, size = None, 224
    cal_dir = out / name / "calibration"
    cal_dir.mkdir(parents=True, exist_ok=True)
    for f in cal_files:
        target = cal_dir / f.name
        if not target.exists():
            target.symlink_to(f)
    cal, val = pixels(cal_files, size), pixels(val_files, size)
    ref = ort_logits(model, val)
    row = {"model": name, "calibration": len(cal_files), "held_out": len(val_files)}
    runs = {"edgeapp": lambda: run_edgeapp(model, cal_dir, out / name / "edgeapp" / f"{name}.tflite"),
            "onnx2tf_cind": lambda: run_onnx2tf(model, cal, out / name / "onnx2tf_cind", True),
            "onnx2tf_default": lambda: run_onnx2tf(model, cal, out / name / "onnx2tf_default", False)}
    for key, fn in runs.items():
        if only and key not in only:
            continue
        path, seconds, error = fn()
        if path is None:
            row[key] = {"error": error, "seconds": round(seconds, 1)}
            continue
        row[key] = {"seconds": round(seconds, 1), **scores(ref, tflite_logits(path, val), labels),
                    "check": verdict(path), "size_kb": round(path.stat().st_size / 1024)}
        print(name, key, row[key], flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path)
    ap.add_argument("--models", nargs="*", default=["digits_cnn", "mobilenet_v2", "resnet18", "efficientnet_b0",
                                                     "mobilenet_v3_large", "shufflenet_v2_x1_0", "squeezenet1_1",
                                                     "regnet_x_400mf"])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--only", nargs="*", choices=["edgeapp", "onnx2tf_cind", "onnx2tf_default"],
                    help="run only these converters")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-onnx-"))
    rows = [bench_model(args.bench, name, out, args.only) for name in args.models]
    text = json.dumps(rows, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
