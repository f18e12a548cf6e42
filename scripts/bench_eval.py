#!/usr/bin/env python3
"""`eval`'s images/s beside `detect`'s and `classify`'s on the same images, in one run.

    python scripts/bench_eval.py [--count 200] [--size 640x480] [--rounds 5] [--json]

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

Images: drawn circles, squares and triangles (scripts/build_yolo_fixtures.py's own drawing) as
JPEGs, with their YOLO labels; the model: tests/fixtures/yolo/yolov8_256_full_integer_quant.tflite.
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
    from edgeapp.cli.options import decode_workers
    from edgeapp.flows.batch import run_batch
    from edgeapp.flows.open_task import Placement, open_task
    from edgeapp.hw.hostinfo import usable_cores

    with open_task(model, None, Placement("auto"), cpu_replicas=usable_cores()) as opened:
        writer = _Lines(out)
        start = time.perf_counter()
        run_batch(paths, opened.runner, opened.task, writer, workers=decode_workers(None))
        writer.f.close()
        return len(paths) / (time.perf_counter() - start)


def run_eval(model: Path, data) -> float:
    from edgeapp.cli.options import decode_workers
    from edgeapp.flows.evaluate import evaluate, open_model
    from edgeapp.flows.open_task import Placement
    from edgeapp.hw.hostinfo import usable_cores

    with open_model(str(model), Placement("auto"), cpu_replicas=usable_cores()) as opened:
        start = time.perf_counter()
        evaluate(opened, data, decode_workers(None))
        return len(data.paths) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--size", default="640x480")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    from edgeapp.flows.evaluate import read_data

    with tempfile.TemporaryDirectory() as tmp:
        root = make_set(Path(tmp) / "set", args.count, size)
        data = read_data(root)
        paths = list(data.paths)
        sides: dict = {"detect": [], "eval": []}
        for r in range(args.rounds + 1):
            got = (run_command(args.model, paths, Path(tmp) / "out.jsonl"), run_eval(args.model, data))
            if r:  # round 0 warms up
                sides["detect"].append(got[0])
                sides["eval"].append(got[1])
    med = {k: statistics.median(v) for k, v in sides.items()}
    doc = {"model": str(args.model), "images": args.count, "size": args.size, "rounds": args.rounds,
           "images_per_s": med, "ratio": med["eval"] / med["detect"], "per_round": sides}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{args.count} JPEGs {args.size}, {args.model.name}, median of {args.rounds} rounds")
    print(f"  detect  {med['detect']:7.1f} images/s")
    print(f"  eval    {med['eval']:7.1f} images/s   ratio {doc['ratio']:.2f} (target >= 0.9)")


if __name__ == "__main__":
    main()
