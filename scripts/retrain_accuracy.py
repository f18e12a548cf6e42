#!/usr/bin/env python3
"""How accurate `edgeapp retrain` is with N photos per class: the numbers in docs/retrain.md
("What to expect"), measured here so anyone can re-run them.

    python scripts/retrain_accuracy.py [--model EXTRACTOR.tflite] [--repeats 5] [--json]

Data sets (nothing is downloaded):
- digits: scikit-learn's handwritten digits (1,797 real 8x8 scans, 10 classes), upscaled to
  96x96 RGB: far from the photos ImageNet features know, so a pessimistic case;
- shapes: generated 96x96 images of 5 shapes (circle, square, triangle, cross, ring) in random
  colours, sizes, positions, on random backgrounds with noise: distinct objects whose colour
  says nothing about the class.
Each image's embedding comes once from the extractor (Coral's MobileNet v1 extractor in
../shared/coral by default) through retrain's own extraction (flows/retrain.extract, cached);
then for each N, `repeats` random draws of N training images per class, both methods with
retrain's defaults, scored on a fixed held-out set (the float head; `--tflite` also runs the
written .tflite through `edgeapp classify` for the largest N).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"
sys.path.insert(0, str(ROOT))
SIZES = (1, 2, 5, 10, 20, 50)
TEST_PER_CLASS = 30


def digits(folder: Path, per_class: int) -> None:
    from PIL import Image
    from sklearn.datasets import load_digits

    d = load_digits()
    seen: dict = {}
    for img, label in zip(d.images, d.target):
        if seen.get(label, 0) >= per_class:
            continue
        seen[label] = seen.get(label, 0) + 1
        pixels = (255 - img * 16).clip(0, 255).astype(np.uint8)  # dark ink on white paper
        out = folder / str(label)
        out.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).resize((96, 96), Image.BICUBIC).convert("RGB").save(
            out / f"{seen[label]:04d}.png")


def shapes(folder: Path, per_class: int, seed: int = 0) -> None:
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    names = ("circle", "square", "triangle", "cross", "ring")
    for name in names:
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            bg = rng.integers(0, 256, 3)
            noise = rng.normal(0, 12, (96, 96, 3))
            img = Image.fromarray(np.clip(bg + noise, 0, 255).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            color = tuple(int(v) for v in rng.integers(0, 256, 3))
            s = int(rng.integers(28, 60))
            x, y = (int(v) for v in rng.integers(4, 92 - s, 2))
            box = [x, y, x + s, y + s]
            if name == "circle":
                draw.ellipse(box, fill=color)
            elif name == "square":
                draw.rectangle(box, fill=color)
            elif name == "triangle":
                draw.polygon([(x, y + s), (x + s, y + s), (x + s // 2, y)], fill=color)
            elif name == "cross":
                t = s // 3
                draw.rectangle([x + t, y, x + 2 * t, y + s], fill=color)
                draw.rectangle([x, y + t, x + s, y + 2 * t], fill=color)
            else:
                draw.ellipse(box, outline=color, width=max(3, s // 6))
            img.save(folder / name / f"{i:04d}.png")


def embeddings(model: Path, folder: Path, cache_root: Path) -> tuple:
    from edgeapp.execution.placement import open_runner
    from edgeapp.flows.embedding_cache import EmbeddingCache
    from edgeapp.flows.retrain import class_folders, extract
    from edgeapp.hw.hostinfo import usable_cores

    classes = class_folders(folder)
    with open_runner(model, "cpu", cpu_replicas=usable_cores()) as runner:
        ex = extract(runner, classes.paths, max(2, usable_cores()), EmbeddingCache(cache_root))
    keep = [i for i, p in enumerate(classes.paths) if p in ex.vectors]
    x = np.stack([ex.vectors[classes.paths[i]] for i in keep])
    return x, np.array([classes.labels[i] for i in keep]), classes


def curve(x: np.ndarray, y: np.ndarray, repeats: int) -> dict:
    from edgeapp.core.learn.train import head_scores, imprint, train_softmax

    k = int(y.max()) + 1
    test = np.concatenate([np.flatnonzero(y == c)[:TEST_PER_CLASS] for c in range(k)])
    pool = [np.flatnonzero(y == c)[TEST_PER_CLASS:] for c in range(k)]
    out: dict = {}
    for n in SIZES:
        if any(len(p) < n for p in pool):
            continue
        acc: dict = {"imprint": [], "softmax": []}
        for r in range(repeats):
            rng = np.random.default_rng(r)
            train = np.concatenate([rng.choice(p, n, replace=False) for p in pool])
            w, b = imprint(x[train], y[train], k)
            acc["imprint"].append(float((head_scores(x[test], w, b).argmax(1) == y[test]).mean()))
            fit = train_softmax(x[train], y[train], k)
            acc["softmax"].append(float((head_scores(x[test], fit.weights, fit.bias).argmax(1)
                                         == y[test]).mean()))
        out[n] = {m: {"mean": float(np.mean(v)), "std": float(np.std(v))} for m, v in acc.items()}
    return out


def tflite_check(model: Path, folder: Path, classes, y: np.ndarray, tmp: Path, env: dict) -> dict:
    """Retrain on all but the test images with the CLI, classify the test images with the
    written .tflite: the quantized model's accuracy."""
    import shutil

    k = len(classes.names)
    train_dir, test_dir = tmp / "train", tmp / "test"
    for c, name in enumerate(classes.names):
        paths = [p for p, label in zip(classes.paths, classes.labels) if label == c]
        for dest, chunk in ((test_dir, paths[:TEST_PER_CLASS]), (train_dir, paths[TEST_PER_CLASS:])):
            (dest / name).mkdir(parents=True, exist_ok=True)
            for p in chunk:
                shutil.copy(p, dest / name / Path(p).name)
    result = {}
    for method in ("imprint", "softmax"):
        out = tmp / f"{method}.tflite"
        subprocess.run([sys.executable, "-m", "edgeapp", "retrain", str(train_dir), "--base",
                        str(model), "-o", str(out), "-m", method, "--val", "0", "-f", "json"],
                       check=True, capture_output=True, env=env, cwd=ROOT)
        proc = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(out), str(test_dir),
                               "-f", "jsonl", "-k", "1"], capture_output=True, text=True, env=env,
                              cwd=ROOT, check=True)
        recs = [json.loads(line) for line in proc.stdout.splitlines()]
        right = sum(r["classes"][0]["label"] == Path(r["path"]).parent.name for r in recs)
        result[method] = {"accuracy": right / len(recs), "images": len(recs),
                          "train_per_class": (len(classes.paths) - k * TEST_PER_CLASS) // k}
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path,
                    default=SHARED / "mobilenet_v1_1.0_224_quant_embedding_extractor.tflite")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tflite", action="store_true", help="also run the written .tflite")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.model.exists():
        sys.exit(f"{args.model} not found: pass an embedding extractor with --model")
    result: dict = {"model": str(args.model), "test_per_class": TEST_PER_CLASS}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        env = {**os.environ, "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"), "EDGEAPP_NO_PROGRESS": "1"}
        os.environ.update(env)
        for name, make, per_class in (("digits", digits, 80), ("shapes", shapes, 80)):
            make(tmp_path / name, per_class)
            x, y, classes = embeddings(args.model, tmp_path / name, tmp_path / "cache")
            result[name] = {"classes": len(classes.names), "curve": curve(x, y, args.repeats)}
            if args.tflite:
                result[name]["tflite"] = tflite_check(args.model, tmp_path / name, classes, y,
                                                      tmp_path / f"{name}_cli", env)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['model']}: accuracy on {TEST_PER_CLASS} held-out images per class, mean of "
          f"{args.repeats} draws (float head)")
    for name in ("digits", "shapes"):
        r = result[name]
        print(f"{name} ({r['classes']} classes)")
        print("  N/class  " + "  ".join(f"{n:>11}" for n in r["curve"]))
        for m in ("imprint", "softmax"):
            print(f"  {m:<8} " + "  ".join(f"{r['curve'][n][m]['mean']:6.1%} ±{r['curve'][n][m]['std']:4.1%}"
                                         for n in r["curve"]))
        for m, t in (r.get("tflite") or {}).items():
            print(f"  .tflite {m}: {t['accuracy']:.1%} of {t['images']} (trained on "
                  f"{t['train_per_class']}/class, run by `edgeapp classify`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
