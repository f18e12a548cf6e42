#!/usr/bin/env python3
"""`eval`'s images/s beside `detect`'s and `classify`'s on the same images, in one run.

    python scripts/bench_eval.py [--count 200] [--size 640x480] [--rounds 5] [--json]
                                 [--task detect|classify|both]

Both sides run in this process through the functions the commands run after start-up, on the
same model, the same images (read once beforehand, so both read them from the page cache), the
same default --workers and CPU interpreters:
  detect    flows.open_task.open_task + flows.batch.run_batch with the task's defaults, records
            written as JSON lines to a file (`edgeapp detect MODEL FOLDER -o out.jsonl`)
  eval      flows.evaluate.evaluate on the same images as a YOLO dataset (every box above
            0.001, up to 300 per image, then pycocotools at the end: `edgeapp eval MODEL
            --data data.yaml`)

Rounds interleave the two sides (one warm-up round first, not counted), so a change of load on
a shared machine hits both alike; the figures are medians over the rounds. Target: eval >= 0.9x.

  classify  the same with the bundled digits classifier (models/digits_int8.tflite) beside
            eval on class folders of the same JPEGs (top-1/top-5)

Images: drawn circles, squares and triangles (scripts/build_yolo_fixtures.py's own drawing) as
JPEGs, with their YOLO labels; the model: tests/fixtures/yolo/yolov8_256_full_integer_quant.tflite.
For classify: models/samples' digits, enlarged with noise to --size, in class folders 0-9.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = ROOT / "tests" / "fixtures" / "yolo" / "yolov8_256_full_integer_quant.tflite"
DIGITS = ROOT / "models" / "digits_int8.tflite"


def make_digits(root: Path, count: int, size: tuple) -> Path:
    """Class folders 0-9 of enlarged, noisy copies of models/samples' digits (JPEG)."""
    from PIL import Image

    rng = np.random.default_rng(2)
    for i in range(count):
        k = i % 10
        digit = Image.open(ROOT / "models" / "samples" / f"digit_{k}.png").convert("RGB").resize(size)
        pixels = np.asarray(digit, np.float32) + rng.normal(0, 8, (size[1], size[0], 3))
        (root / str(k)).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(root / str(k) / f"{i:05d}.jpg", quality=90)
    for p in root.rglob("*.jpg"):
        p.read_bytes()
    return root


def make_set(root: Path, count: int, size: tuple) -> Path:
    import cv2

    spec = importlib.util.spec_from_file_location("build", ROOT / "scripts" / "build_yolo_fixtures.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    rng = np.random.default_rng(1)
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    w, h = size
    for i in range(count):
        img, boxes = build.draw_shapes(rng, w, h, 6.0)
        cv2.imwrite(str(root / "images" / f"{i:05d}.jpg"), img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
        (root / "labels" / f"{i:05d}.txt").write_text("".join(
            f"{c} {(a + b) / 2 / w:.6f} {(d + e) / 2 / h:.6f} {(b - a) / w:.6f} {(e - d) / h:.6f}\n"
            for c, a, d, b, e in boxes))
    (root / "classes.txt").write_text("circle\nsquare\ntriangle\n")
    for p in (root / "images").iterdir():  # into the page cache
        p.read_bytes()
    return root


class _Lines:
    """The records writer of `-o out.jsonl`: one JSON line per record."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "w")

    def is_done(self, path: str) -> bool:
        return False

    def write(self, record: dict) -> None:
        self.f.write(json.dumps(record) + "\n")


def run_command(model: Path, paths: list, out: Path) -> float:
    from edgeapp.flows.batch import run_batch
    from edgeapp.flows.open_task import Placement, open_task
    from edgeapp.hw.hostinfo import decode_workers, usable_cores

    with open_task(model, None, Placement("auto"), cpu_replicas=usable_cores()) as opened:
        writer = _Lines(out)
        start = time.perf_counter()
        run_batch(paths, opened.runner, opened.task, writer, workers=decode_workers(None))
        writer.f.close()
        return len(paths) / (time.perf_counter() - start)


def run_eval(model: Path, data) -> float:
    from edgeapp.flows.evaluate import evaluate, open_for_eval
    from edgeapp.flows.open_task import Placement
    from edgeapp.hw.hostinfo import decode_workers, usable_cores

    with open_for_eval(str(model), Placement("auto"), cpu_replicas=usable_cores()) as opened:
        start = time.perf_counter()
        evaluate(opened, data, decode_workers(None))
        return len(data.paths) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--size", default="640x480")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--task", choices=("detect", "classify", "both"), default="both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    tasks = ("detect", "classify") if args.task == "both" else (args.task,)
    docs = [compare(task, args, size) for task in tasks]
    if args.json:
        print(json.dumps(docs, indent=2))
        return
    for doc in docs:
        med = doc["images_per_s"]
        print(f"{args.count} JPEGs {args.size}, {Path(doc['model']).name}, median of {args.rounds} rounds")
        print(f"  {doc['task']:<8} {med['command']:7.1f} images/s")
        print(f"  eval     {med['eval']:7.1f} images/s   ratio {doc['ratio']:.2f} (target >= 0.9)")


def compare(task: str, args, size: tuple) -> dict:
    """Interleaved rounds of the task's command and eval on the same images."""
    from edgeapp.flows.evaluate import read_data

    model = args.model if task == "detect" else DIGITS
    with tempfile.TemporaryDirectory() as tmp:
        make = make_set if task == "detect" else make_digits
        data = read_data(make(Path(tmp) / "set", args.count, size))
        sides: dict = {"command": [], "eval": []}
        for r in range(args.rounds + 1):
            got = (run_command(model, list(data.paths), Path(tmp) / "out.jsonl"), run_eval(model, data))
            if r:  # round 0 warms up
                sides["command"].append(got[0])
                sides["eval"].append(got[1])
    med = {k: statistics.median(v) for k, v in sides.items()}
    return {"task": task, "model": str(model), "images": args.count, "size": args.size,
            "rounds": args.rounds, "images_per_s": med, "ratio": med["eval"] / med["command"],
            "per_round": sides}


if __name__ == "__main__":
    main()
