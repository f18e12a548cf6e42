#!/usr/bin/env python3
"""YOLO int8 as a plain `edgeapp convert` writes it, against float mAP50-95, with the Edge TPU share.

Each committed YOLO ONNX fixture (tests/fixtures/yolo_onnx: YOLOv8, YOLO11, YOLOv5u) converted
as a user converts it (`edgeapp convert X.onnx -o X.tflite --calibration shapes_calib/`, a
subprocess), with `--eval shapes_val/data.yaml` (84 labelled images: the default's trials are
then measured in mAP50-95 as `edgeapp eval` computes it) and without (measured in box agreement
on the 12 calibration images held out). The report gives the float and int8 mAP50-95 (with
`--eval`), which ranges the default wrote (the calibrator's, or re-measured: flows/convert/tune.
Tuning.remeasure, kept when it measures better), `check`'s ops and MACs on the Edge TPU, and the
seconds the re-measured trial added.

Measured (2 shared cores under other jobs, TensorFlow 2.21, onnx2tf 1.28.8; 52 calibration
images, 12 held out; "plain" and "re-measured": the two int8 models the default measured):

               with --eval (mAP50-95)                                    no labels (box agreement)
  fixture  float    plain / re-measured  written: int8 (points)          plain / re-measured  written
  YOLOv8   0.8293   0.8232 / 0.8222      calibrator's: 0.8232 (-0.60)    1.0000 / 0.9942      calibrator's
  YOLO11   0.6246   0.6175 / 0.6247      re-measured:  0.6247 (+0.00)    0.9680 / 0.9753      re-measured
  YOLOv5u  0.6049   0.6024 / 0.6022      calibrator's: 0.6024 (-0.25)    0.9718 / 0.9606      calibrator's

Before this default a plain conversion wrote the calibrator's ranges: -0.60, -0.71, -0.25. With
and without labels the default writes the same model here (box agreement on the 12 held-out
images ranks the two as mAP50-95 on the 84 labelled ones does). Every model: every op and 100%
of the MACs on the Edge TPU (237/237, 523/523, 257/257). The re-measured trial added 22 s of a
124 s conversion (YOLOv8, --eval), 51 of 226 (YOLO11), 77 of 254 (YOLOv5u); without labels 28
of 382 (YOLO11) and 22 of 110 (YOLOv5u): a second calibration, one float run keeping every
tensor, and both models measured. How much the choice of ranges moves with the calibration
sample: scripts/bench_yolo_calibration.py.

Run in the edgeapp venv with the onnx and eval extras (2-3 minutes per conversion on 2 shared cores):

    python scripts/bench_yolo_default.py [--fixtures yolov8 yolo11 yolov5u] [--no-labels] [--json out.json]
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

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "yolo_onnx"
ONNX = {"yolov8": "yolov8_shapes_256.onnx", "yolo11": "yolo11_shapes_256.onnx", "yolov5u": "yolov5u_shapes_256.onnx"}


def convert(name: str, labelled: bool, tmp: Path) -> dict:
    """One default conversion's row."""
    out = tmp / f"{name}.tflite"
    args = [sys.executable, "-m", "edgeapp", "convert", str(FIXTURES / ONNX[name]), "-o", str(out),
            "--calibration", str(FIXTURES / "shapes_calib"), "--format", "json"]
    if labelled:
        args += ["--eval", str(FIXTURES / "shapes_val" / "data.yaml")]
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if proc.returncode != 0:
        raise SystemExit(f"{name}: convert exited {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    ranges, check = report.get("ranges") or {}, report["edgetpu_check"]
    before, after = ranges.get("before") or {}, ranges.get("remeasured") or {}
    row = {"fixture": name, "measured_by": ranges.get("metric"), "ranges_kept": ranges.get("kept"),
           "plain": before.get("int8"), "remeasured": after.get("int8"),
           "ranges_seconds": ranges.get("seconds"), "convert_seconds": round(time.perf_counter() - started, 1),
           "ops_tpu": check["ops_tpu"], "ops_total": check["ops_total"], "macs_tpu_share": check["macs_tpu_share"]}
    if labelled:
        row["float_map"] = report["eval"]["float"]["metrics"]["map"]
        row["int8_map"] = report["eval"]["int8"]["metrics"]["map"]
        row["drop_points"] = round((row["float_map"] - row["int8_map"]) * 100, 2)
    return row


def line(r: dict) -> str:
    written = "re-measured" if r["ranges_kept"] else "calibrator's"
    head = f"{r['fixture']:8} {written:12} ranges ({r['measured_by']}: plain {r['plain']:.4f}, re-measured " \
           f"{r['remeasured']:.4f}; +{r['ranges_seconds']:.1f} s of {r['convert_seconds']:.0f} s)"
    maps = (f"  float {r['float_map']:.4f} int8 {r['int8_map']:.4f} ({-r['drop_points']:+.2f} points)"
            if "float_map" in r else "")
    return f"{head}{maps}  Edge TPU {r['ops_tpu']}/{r['ops_total']} ops, {r['macs_tpu_share']:.1%} of MACs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", nargs="+", default=list(ONNX), choices=list(ONNX))
    ap.add_argument("--no-labels", action="store_true", help="convert without --eval (box agreement decides)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgeapp-bench-") as tmp:
        for name in a.fixtures:
            rows.append(convert(name, not a.no_labels, Path(tmp)))
            print(line(rows[-1]), file=sys.stderr, flush=True)
    print("\n".join(line(r) for r in rows))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
