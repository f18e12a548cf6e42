#!/usr/bin/env python3
"""How well and how fast `camera --track` tracks: edgeapp's tracker beside two references'
ByteTrack, Roboflow's `trackers` (ByteTrackTracker) and `supervision` (sv.ByteTrack), all fed
the same detections, scored with motmetrics against known trajectories.

Scenes are rendered videos of drawn shapes (tests/shapes_video.py): objects entering, crossing,
hidden for a few frames and leaving, on known straight paths. The shapes YOLO detector
(tests/fixtures/yolo/, the real runtime) finds them frame by frame, at the tracker's low
threshold; both trackers get the same boxes. motmetrics matches each tracker's boxes to the
ground truth (IoU >= 0.5) and reports MOTA, IDF1 and ID switches. Line counts are checked
against the ground-truth centres crossing a vertical line at the middle.

Then the tracker's own cost: median and p99 milliseconds per frame for 20 objects.

    pip install motmetrics trackers "supervision<0.27"   # the references (Python >= 3.10);
    # supervision 0.27 moved its ByteTrack out (into `trackers`)
    python scripts/bench_tracking.py [--scenes 8] [--first 0] [--frames 150] [--json out.json]

The scenes the tracker was tuned on are seeds 0..7; `--first 100` scores held-out ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from shapes_video import random_scene  # noqa: E402

DETECTOR = ROOT / "models" / "shapes_yolov8_int8.tflite"  # the shipped shapes detector
HIGH, LOW, IOU = 0.25, 0.1, 0.45


def detections(scene, detector: Path = DETECTOR) -> list:
    """Per frame: (boxes (N, 4), scores, classes) from the real detector, down to LOW."""
    from edgeapp import open_model

    out = []
    with open_model(detector, device="cpu") as model:
        for f in range(scene.frames):
            rgb = scene.render(f)[:, :, ::-1]
            objects = model.detect(rgb, threshold=LOW, iou=IOU)
            out.append((np.array([o["bbox"] for o in objects], float).reshape(-1, 4),
                        np.array([o["score"] for o in objects], float),
                        np.array([o["id"] for o in objects], int)))
    return out


def run_edgeapp(dets: list, **settings) -> tuple:
    """(tracked boxes per frame, the same with each track's first, unconfirmed box added in
    the frame it was seen: what flows/camera/tracking.py counts lines from)."""
    from edgeapp.core.track.tracking import ByteTracker, TrackerSettings

    tracker = ByteTracker(TrackerSettings(high=HIGH, low=LOW, **settings))
    frames, for_lines = [], []
    for boxes, scores, classes in dets:
        step = tracker.update(boxes, scores, classes)
        items = [(tid, tuple(b)) for tid, b in zip(step.ids, boxes) if tid is not None]
        for t in step.started:
            if t.first_box is not None and t.first_frame < tracker.frame:
                for_lines[t.first_frame - 1].append((t.track_id, t.first_box))
        frames.append(items)
        for_lines.append(list(items))
    return frames, for_lines


def run_supervision(dets: list, fps: float = 30.0) -> list:
    import supervision as sv

    tracker = sv.ByteTrack(track_activation_threshold=HIGH, lost_track_buffer=30,
                           frame_rate=int(fps))
    frames = []
    for boxes, scores, classes in dets:
        d = sv.Detections(xyxy=boxes.astype(np.float32), confidence=scores.astype(np.float32),
                          class_id=classes)
        tracked = tracker.update_with_detections(d)
        frames.append([(int(t), tuple(b)) for t, b in zip(tracked.tracker_id, tracked.xyxy)])
    return frames


def run_trackers(dets: list, fps: float = 30.0) -> list:
    """Roboflow `trackers`' ByteTrack as it comes (its own thresholds: boxes above 0.6 matched
    first, above 0.7 start tracks; given edgeapp's 0.25 for both it switches ids five times as
    often on these scenes). Its ids are -1 until a track is seen twice: those boxes are left out."""
    import supervision as sv
    from trackers import ByteTrackTracker

    tracker = ByteTrackTracker(lost_track_buffer=30, frame_rate=fps)
    frames = []
    for boxes, scores, classes in dets:
        d = sv.Detections(xyxy=boxes.astype(np.float32), confidence=scores.astype(np.float32),
                          class_id=classes)
        tracked = tracker.update(d)
        frames.append([(int(t), tuple(b)) for t, b in zip(tracked.tracker_id, tracked.xyxy)
                       if t >= 0])
    return frames


REFERENCES = {"trackers": run_trackers, "supervision": run_supervision}


def score(scene, frames: list) -> dict:
    if not hasattr(np, "asfarray"):  # motmetrics 1.4 (its last release) calls it; numpy 2 removed it
        np.asfarray = lambda a, dtype=np.float64: np.asarray(a, dtype=dtype)
    import motmetrics as mm

    acc = mm.MOTAccumulator(auto_id=True)
    for f, tracked in enumerate(frames):
        truth = scene.truth(f)
        gt_ids = [i for i, _ in truth]
        gt = np.array([[b[0], b[1], b[2] - b[0], b[3] - b[1]] for _, b in truth]).reshape(-1, 4)
        hyp_ids = [t for t, _ in tracked]
        hyp = np.array([[b[0], b[1], b[2] - b[0], b[3] - b[1]] for _, b in tracked]).reshape(-1, 4)
        acc.update(gt_ids, hyp_ids, mm.distances.iou_matrix(gt, hyp, max_iou=0.5))
    summary = mm.metrics.create().compute(acc, metrics=["mota", "idf1", "num_switches"], name="x")
    return {k: float(summary[k].iloc[0]) for k in ("mota", "idf1", "num_switches")}


def line_counts(scene, frames: list) -> tuple:
    """(truth, tracked) counts of objects crossing x = width / 2 each way, once per object."""
    from edgeapp.core.track.zones import Line, centre, crossing, side

    line = Line("mid", ((scene.width / 2, 0.0), (scene.width / 2, float(scene.height))))

    def count(per_frame) -> dict:
        sides: dict = {}
        seen: set = set()
        for items in per_frame:
            for key, box in items:
                s = side(centre(box), line)
                if s == 0:
                    continue
                d = crossing(sides.get(key), s)
                sides[key] = s
                if d is not None:
                    seen.add((key, d))
        return {"in": sum(1 for _, d in seen if d == "in"), "out": sum(1 for _, d in seen if d == "out")}

    truth = [[(i, b) for i, b in scene.truth(f)] for f in range(scene.frames)]
    return count(truth), count(frames)


def cost(objects: int = 20, frames: int = 300) -> dict:
    from edgeapp.core.track.tracking import ByteTracker

    rng = np.random.default_rng(1)
    tracker = ByteTracker()
    pos = rng.uniform(50, 600, (objects, 2))
    vel = rng.uniform(-3, 3, (objects, 2))
    times = []
    for _ in range(frames):
        pos += vel
        boxes = np.concatenate([pos - 15, pos + 15], 1) + rng.normal(0, 1, (objects, 4))
        t0 = time.perf_counter()
        tracker.update(boxes, np.full(objects, 0.8), np.zeros(objects, int))
        times.append((time.perf_counter() - t0) * 1000)
    times = times[20:]  # warm-up
    return {"objects": objects, "p50_ms": round(float(np.median(times)), 3),
            "p99_ms": round(float(np.percentile(times, 99)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--first", type=int, default=0, help="the first scene's seed (100: held out)")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--model", type=Path, default=DETECTOR, help="a detection model for the shapes")
    args = ap.parse_args()
    rows = []
    who = ("edgeapp",) + tuple(REFERENCES)
    for seed in range(args.first, args.first + args.scenes):
        scene = random_scene(seed, frames=args.frames)
        dets = detections(scene, args.model)
        ours, ours_lines = run_edgeapp(dets)
        tracked = {"edgeapp": ours, **{name: run(dets) for name, run in REFERENCES.items()}}
        truth_counts = line_counts(scene, ours_lines)[0]
        row = {"scene": seed, **{w: score(scene, tracked[w]) for w in who},
               "line_truth": truth_counts, "line_edgeapp": line_counts(scene, ours_lines)[1],
               **{f"line_{w}": line_counts(scene, tracked[w])[1] for w in REFERENCES}}
        rows.append(row)
        print(f"scene {seed}: " + " | ".join(
            f"{w} IDF1 {row[w]['idf1']:.3f} MOTA {row[w]['mota']:.3f} switches "
            f"{row[w]['num_switches']:.0f}" for w in who) + f" | line truth {truth_counts} "
            f"edgeapp {row['line_edgeapp']}", flush=True)
    per = {w: {k: round(float(np.mean([r[w][k] for r in rows])), 4) for k in ("mota", "idf1")}
           for w in who}
    for w in who:
        per[w]["num_switches"] = int(sum(r[w]["num_switches"] for r in rows))
    timing = cost()
    print(f"scenes {args.first}..{args.first + args.scenes - 1}, mean IDF1 / MOTA, switches summed:")
    print("| tracker | IDF1 | MOTA | ID switches |\n| --- | --- | --- | --- |")
    for w in who:
        print(f"| {w} | {per[w]['idf1']:.3f} | {per[w]['mota']:.3f} | {per[w]['num_switches']} |")
    print(f"tracker cost, {timing['objects']} objects: p50 {timing['p50_ms']} ms, p99 {timing['p99_ms']} ms")
    if args.json:
        args.json.write_text(json.dumps({"scenes": rows, "mean": per, "cost": timing}, indent=1))


if __name__ == "__main__":
    main()
