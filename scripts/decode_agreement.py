#!/usr/bin/env python3
"""Top-1 agreement of `--decode scaled` with `--decode full` on photos, per classifier.

    python scripts/decode_agreement.py PHOTO_OR_FOLDER... [--model M.tflite ...]
                                       [--crops N] [--json]

Each photo is classified twice through edgeapp's API (`open_model(..., decode=...)`, the batch
path `classify` runs), once decoded scaled (the default: libjpeg's DCT scale the input needs)
and once whole; the figure is the share of photos whose top-1 class is the same, with the
mean absolute difference of the top-1 score. Only JPEGs count (other formats decode the same
either way). `--crops N` adds N random crops (40-100 % of each side, at the photo's own
resolution, re-encoded at quality 90) of the photos given: more samples of real photo
content than the few photos at hand, though not independent of them. Models default to
Coral's MobileNet V2 and MobileNet v1 0.25/128 in ../shared/coral.

`--yardsticks` adds, on the same photos and straight through core/vision/preprocess (no API), how
top-1 moves under two other changes of preprocessing, to read the figure against: a full decode
resized with BICUBIC instead of LANCZOS (how sensitive the photos are to any change of
resampling), and a scaled decode that keeps at least twice the input's pixels (one DCT scale
less reduction than `--decode scaled`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import List

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "coral"
MODELS = [SHARED / "mobilenet_v2_1.0_224_quant.tflite", SHARED / "mobilenet_v1_0.25_128_quant.tflite"]
sys.path.insert(0, str(ROOT))


def jpegs(args: List[str]) -> List[str]:
    from PIL import Image

    from edgeapp.flows.inputs import expand_inputs

    return [p for p in expand_inputs(args) if Image.open(p).format in ("JPEG", "MPO")]


def crops(photos: List[str], count: int, folder: Path) -> List[str]:
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        img = Image.open(photos[i % len(photos)]).convert("RGB")
        w, h = (int(img.width * rng.uniform(0.4, 1.0)), int(img.height * rng.uniform(0.4, 1.0)))
        x, y = int(rng.integers(0, img.width - w + 1)), int(rng.integers(0, img.height - h + 1))
        p = folder / f"crop_{i:04d}.jpg"
        img.crop((x, y, x + w, y + h)).save(p, quality=90)
        out.append(str(p))
    return out


def top1(model: Path, paths: List[str], decode: str) -> List[tuple]:
    import edgeapp

    with edgeapp.open_model(model, "cpu", task="classify", decode=decode, top_k=1) as m:
        return [(r["classes"][0]["id"], r["classes"][0]["score"]) if r["classes"] else (None, 0.0)
                for r in m.batch(paths)]


def reduced(model: Path, paths: List[str]) -> int:
    """How many of the photos the scaled decode actually decodes at a reduced scale."""
    from edgeapp.core.vision.preprocess import decode_image
    from edgeapp.hw.runtime import open_engine

    shape = open_engine(model, "cpu").input_shape
    return sum(decode_image(p, 3, (int(shape[2]), int(shape[1]))).scale > 1 for p in paths)


def agreement(model: Path, paths: List[str]) -> dict:
    scaled, full = top1(model, paths, "scaled"), top1(model, paths, "full")
    same = sum(a[0] == b[0] for a, b in zip(scaled, full))
    delta = float(np.mean([abs(a[1] - b[1]) for a, b in zip(scaled, full)])) if paths else 0.0
    return {"photos": len(paths), "decoded_reduced": reduced(model, paths), "same_top1": same,
            "agreement": same / len(paths) if paths else None,
            "mean_abs_top1_score_delta": round(delta, 4),
            "differ": [p for p, a, b in zip(paths, scaled, full) if a[0] != b[0]]}


def yardsticks(model: Path, paths: List[str]) -> dict:
    from PIL import Image

    from edgeapp.core.vision.preprocess import fit_pixels, load_image, quantize_input
    from edgeapp.hw.runtime import open_engine

    engine = open_engine(model, "cpu")
    size = (int(engine.input_shape[2]), int(engine.input_shape[1]))
    scale, zero = engine.input_quantization

    def top(pixels: np.ndarray) -> int:
        return int(np.argmax(engine.run(quantize_input(pixels, engine.input_dtype, scale, zero)[None])[0]))

    same = {"bicubic": 0, "scaled_2x": 0}
    for p in paths:
        full = load_image(p)
        reference = top(fit_pixels(full, size)[0])
        same["bicubic"] += top(np.asarray(full.resize(size, Image.BICUBIC))) == reference
        twice = load_image(p, 3, (2 * size[0], 2 * size[1]))
        same["scaled_2x"] += top(fit_pixels(twice, size)[0]) == reference
    return {k: round(v / len(paths), 4) for k, v in same.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("photos", nargs="+")
    ap.add_argument("--model", type=Path, action="append")
    ap.add_argument("--crops", type=int, default=0)
    ap.add_argument("--yardsticks", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    photos = jpegs(args.photos)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        sets = {"photos": photos}
        if args.crops:
            sets["crops"] = crops(photos, args.crops, Path(tmp))
        for model in args.model or [m for m in MODELS if m.is_file()]:
            for name, paths in sets.items():
                result[f"{model.stem} / {name}"] = agreement(model, paths)
                if args.yardsticks:
                    result[f"{model.stem} / {name}"]["yardsticks"] = yardsticks(model, paths)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, r in result.items():
            print(f"{key} ({r['decoded_reduced']} decoded at a reduced scale): top-1 agrees on "
                  f"{r['same_top1']}/{r['photos']} ({r['agreement']:.1%}), "
                  f"yardsticks {r.get('yardsticks', '-')}, "
                  f"mean |top-1 score delta| {r['mean_abs_top1_score_delta']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
