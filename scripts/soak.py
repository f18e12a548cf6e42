#!/usr/bin/env python3
"""A soak you can rerun: a camera video loop and a batch side by side on one (stand-in) Edge TPU
in a worker process, with faults injected at random times, then what came out.

    python scripts/soak.py --minutes N --seed S [--faults-per-minute F] [--models 2] [--json]

Both pipelines open the same model on the same device, so they share one worker (hw/worker/);
with --models 2 the camera runs a second model, which the same worker runs beside the first.
Faults, each at a random time drawn from --seed, through the extension points only:
  hang    the worker is stopped (SIGSTOP): an invoke that never returns
  kill    the worker is killed (SIGKILL)
  error   the next worker's delegate fails after a few invokes (the stand-in's FAKE_EDGETPU_FAIL)
  gone    the device leaves the bus (FAKE_EDGETPU_DEVICES=none) and the worker dies; it comes
          back after a random 1-12 s, so short outages end at a restart or a reset, long ones
          on the CPU twin, which hands back once the device answers (--retry-tpu 5)
Printed, with p50/p99: results written, lost and duplicated (batch: per input of every pass;
camera: per frame of every pass over the video) and results that differ from a clean run's;
outages and recovery times by cause (from the lost invoke's start: a hang's include its
deadline; the Edge TPU handed back after a stay on the CPU twin apart), each hang's deadline and
its recovery beyond it, the slowest three; RSS, open files and threads at the start and the end.

The Edge TPU is tests/standin.py's stand-in (built with the C compiler), the model the bundled
digits model compiled-looking (its CPU twin the model itself): no hardware is needed, and what
only real hardware shows (libedgetpu's own hangs, USB resets) is not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

FAULTS = ("hang", "kill", "error", "gone")


def worker_pids() -> list:
    """This process's worker children, by their command line (tests/worker_procs.py)."""
    from worker_procs import workers_of

    return workers_of(os.getpid())


def resources() -> dict:
    status = Path("/proc/self/status").read_text()
    field = {line.split(":")[0]: line.split(":")[1].strip() for line in status.splitlines() if ":" in line}
    return {"rss_mb": round(int(field["VmRSS"].split()[0]) / 1024, 1),
            "open_files": len(os.listdir("/proc/self/fd")), "threads": int(field["Threads"]),
            "workers": len(worker_pids())}


def percentiles(values: list) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    a = np.asarray(values)
    return {"n": len(values), "p50": round(float(np.percentile(a, 50)), 3),
            "p99": round(float(np.percentile(a, 99)), 3), "max": round(float(a.max()), 3)}


class Counter:
    """Results per key of one pass: written once, lost, twice, or different from the clean run."""

    def __init__(self) -> None:
        self.written = self.lost = self.duplicated = self.different = self.on_twin = self.passes = 0

    def pass_done(self, keys: list, got: list, reference: dict, value) -> None:
        self.passes += 1
        seen: dict = {}
        for record in got:
            seen[record[0]] = seen.get(record[0], 0) + 1
            if record[1] == "cpu":
                self.on_twin += 1
            elif value(record) != reference[record[0]]:
                self.different += 1
        self.written += sum(1 for k in keys if seen.get(k))
        self.lost += sum(1 for k in keys if not seen.get(k))
        self.duplicated += sum(n - 1 for n in seen.values() if n > 1)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def setup(folder: Path, delay_ms: float, models: int = 1) -> tuple:
    from conftest import make_edgetpu_stand_in
    from media import CLASSES, make_images, make_video
    from standin import build_standin, standin_env

    env = standin_env(build_standin(folder / "lib"), "usb", delay_ms)
    os.environ.update(env)
    os.environ["EDGEAPP_CACHE_DIR"] = str(folder / "cache")
    twin = folder / "digits_int8.tflite"
    twin.write_bytes((ROOT / "models" / "digits_int8.tflite").read_bytes())
    model = make_edgetpu_stand_in(twin, folder / "digits_int8_edgetpu.tflite")
    camera_model = model
    if models == 2:  # the camera's a second model (a copy under another name, its own twin)
        other = folder / "other" / "digits_copy.tflite"
        other.parent.mkdir()
        other.write_bytes(twin.read_bytes())
        camera_model = make_edgetpu_stand_in(other, other.parent / "digits_copy_edgetpu.tflite")
    images = [str(p) for p in make_images(folder / "images", [CLASSES[i % 3] for i in range(120)],
                                          size=32, seed=4)]
    video = make_video(folder / "video.avi", [CLASSES[(i // 5) % 3] for i in range(60)],
                       size=(64, 48), seed=4)
    return (model, camera_model), images, video


class Soak:
    def __init__(self, models: tuple, images: list, video: Path, seconds: float, rng: random.Random,
                 per_minute: float) -> None:
        from edgeapp.flows.open_task import Placement
        from edgeapp.hw.runtime import EngineOptions
        from edgeapp.hw.worker.events import Tally

        (self.model, self.camera_model), self.images, self.video = models, images, video
        self.seconds = seconds
        self.rng, self.per_minute = rng, per_minute
        self.place = Placement("auto", EngineOptions(isolate=True, retry_tpu=5.0, probe=False))
        self.tally = Tally()
        self.batch, self.camera = Counter(), Counter()
        self.faults: dict = {f: 0 for f in FAULTS}
        self.stop = threading.Event()
        self.errors: list = []

    # -- the two pipelines -------------------------------------------------------------------

    def batch_loop(self, reference: dict) -> None:
        from edgeapp.flows.batch import iter_records
        from edgeapp.flows.open_task import open_task

        with open_task(self.model, "classify", self.place) as opened:
            while not self.stop.is_set():
                got = [(r["path"], r["device"], r) for r in
                       iter_records(self.images, opened.runner, opened.task, workers=1)]
                self.batch.pass_done(self.images, got, reference, lambda x: x[2]["classes"])

    def camera_loop(self, reference: dict) -> None:
        from edgeapp.flows.camera.loop import run_camera
        from edgeapp.flows.open_task import open_task
        from edgeapp.hw.capture import OpenCVSource

        with open_task(self.camera_model, "classify", self.place, frames=True) as opened:
            while not self.stop.is_set():
                got: list = []
                run_camera(OpenCVSource(str(self.video)), opened.runner, drop=False,
                           on_record=lambda r: got.append((r["frame"], r["device"], r)),
                           stop_event=self.stop)
                if not self.stop.is_set():
                    self.camera.pass_done(sorted(reference), got, reference, lambda x: x[2]["classes"])

    # -- the faults ---------------------------------------------------------------------------

    def inject(self) -> None:
        end = time.monotonic() + self.seconds
        while not self.stop.wait(self.rng.expovariate(self.per_minute / 60.0)):
            if time.monotonic() > end - 15:  # the last outage ends before the run does
                return
            pids = worker_pids()
            if not pids:
                continue
            fault = self.rng.choice(FAULTS)
            self.faults[fault] += 1
            if fault == "hang":
                os.kill(pids[0], signal.SIGSTOP)
            elif fault == "kill":
                os.kill(pids[0], signal.SIGKILL)
            elif fault == "error":
                os.environ["FAKE_EDGETPU_FAIL"] = f"usb:0@{self.rng.randint(5, 40)}"
                os.kill(pids[0], signal.SIGKILL)  # the next worker's delegate fails
            else:
                os.environ["FAKE_EDGETPU_DEVICES"] = "none"
                os.kill(pids[0], signal.SIGKILL)
                away = self.rng.uniform(1.0, 12.0)
                threading.Timer(away, lambda: os.environ.__setitem__("FAKE_EDGETPU_DEVICES", "usb")).start()

    def on_event(self, event) -> None:
        self.tally(event)
        if event.event == "engine_lost" and event.cause == "error":
            os.environ.pop("FAKE_EDGETPU_FAIL", None)  # one delegate error per fault

    def run(self) -> dict:
        from edgeapp.hw.worker import events

        reference = self.references()
        threads = [threading.Thread(target=self._guard, args=(f, ref), daemon=True)
                   for f, ref in ((self.batch_loop, reference[0]), (self.camera_loop, reference[1]))]
        with events.listening(self.on_event, lambda text: None):
            for t in threads:
                t.start()
            time.sleep(min(10.0, self.seconds / 10))  # warmed up: the start figures
            start = resources()
            injector = threading.Thread(target=self.inject, daemon=True)
            injector.start()
            self.stop.wait(self.seconds)
            end = resources()  # still running, as at the start
            self.stop.set()
            for t in threads + [injector]:
                t.join(timeout=120)
        return self.report(start, end)

    def _guard(self, loop, reference) -> None:
        try:
            loop(reference)
        except BaseException as e:  # noqa: BLE001 - reported, the other loop goes on
            self.errors.append(f"{loop.__name__}: {type(e).__name__}: {e}")

    def references(self) -> tuple:
        """The clean run's classes per image and per frame (on the stand-in, no fault)."""
        from edgeapp.flows.batch import iter_records
        from edgeapp.flows.camera.loop import run_camera
        from edgeapp.flows.open_task import open_task
        from edgeapp.hw.capture import OpenCVSource

        with open_task(self.model, "classify", self.place) as opened:
            batch = {r["path"]: r["classes"] for r in iter_records(self.images, opened.runner, opened.task)}
        frames: dict = {}
        with open_task(self.camera_model, "classify", self.place, frames=True) as opened:
            run_camera(OpenCVSource(str(self.video)), opened.runner, drop=False,
                       on_record=lambda r: frames.__setitem__(r["frame"], r["classes"]))
        return batch, frames

    def hang_figures(self) -> dict:
        """Each hang's deadline (the seconds its invoke waited, its `engine_lost` event's), the
        steps that brought it back, and a restart's time beyond the deadline (the new worker
        started with its models open)."""
        deadlines, beyond, steps, lost = [], [], {}, None
        for e in self.tally.events:
            if e.event == "engine_lost" and e.step is None:
                lost = e
            elif e.event == "engine_recovered" and lost is not None and lost.cause == "hang" \
                    and e.step != "hand-back":
                steps[e.step] = steps.get(e.step, 0) + 1
                deadlines.append(lost.seconds)
                if e.step == "restart":  # not a device gone meanwhile (the ladder, the twin)
                    beyond.append(e.seconds - lost.seconds)
                lost = None
        return {"deadline_seconds": percentiles(deadlines), "beyond_deadline_seconds": percentiles(beyond),
                "steps": steps}

    def report(self, start: dict, end: dict) -> dict:
        recovered = [e for e in self.tally.events if e.event == "engine_recovered"]
        by_cause: dict = {}
        for e in recovered:  # a hand-back ends a stay on the CPU twin, counted apart
            by_cause.setdefault(e.cause if e.step != "hand-back" else "hand-back", []).append(e.seconds)
        return {"faults": self.faults, "faults_total": sum(self.faults.values()),
                "batch": self.batch.as_dict(), "camera": self.camera.as_dict(),
                "engine": self.tally.summary(),
                "recovery_seconds": percentiles([e.seconds for e in recovered]),
                "recovery_seconds_by_cause": {c: percentiles(v) for c, v in sorted(by_cause.items())},
                "hang": self.hang_figures(),
                "slowest": [e.as_dict() for e in sorted(recovered, key=lambda e: -e.seconds)[:3]],
                "resources": {"start": start, "end": end}, "errors": self.errors}


def print_report(r: dict, minutes: float, seed: int) -> None:
    print(f"soak: {minutes:g} min, seed {seed}: {r['faults_total']} fault(s) injected "
          f"({', '.join(f'{n} {f}' for f, n in r['faults'].items())})")
    for name in ("batch", "camera"):
        c = r[name]
        print(f"  {name}: {c['passes']} pass(es), {c['written']} written, {c['lost']} lost, "
              f"{c['duplicated']} duplicated, {c['different']} different from the clean run, "
              f"{c['on_twin']} on the CPU twin")
    e = r["engine"]
    print(f"  engine: lost {e['engine_lost']} time(s) {e['causes']}, recovered {e['engine_recovered']} "
          f"{e['steps']}, {e['outage_seconds']:.1f} s without it")
    p = r["recovery_seconds"]
    print(f"  recovery: p50 {p['p50']} s, p99 {p['p99']} s, max {p['max']} s")
    for cause, q in r["recovery_seconds_by_cause"].items():
        print(f"    {cause}: n {q['n']}, p50 {q['p50']} s, p99 {q['p99']} s, max {q['max']} s")
    d, b = r["hang"]["deadline_seconds"], r["hang"]["beyond_deadline_seconds"]
    print(f"    hang deadline: p50 {d['p50']} s, p99 {d['p99']} s, max {d['max']} s; back by {r['hang']['steps']}; "
          f"a restart's beyond the deadline: p50 {b['p50']} s, p99 {b['p99']} s, max {b['max']} s")
    for e in r["slowest"]:
        print(f"    slowest: {e['cause']} on {e['device']}, back by {e['step']} after {e['seconds']} s")
    s, t = r["resources"]["start"], r["resources"]["end"]
    print(f"  RSS {s['rss_mb']} -> {t['rss_mb']} MB, open files {s['open_files']} -> {t['open_files']}, "
          f"threads {s['threads']} -> {t['threads']}, workers {s['workers']} -> {t['workers']}")
    for error in r["errors"]:
        print(f"  error: {error}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--faults-per-minute", type=float, default=2.5)
    ap.add_argument("--delay-ms", type=float, default=2.0, help="the stand-in's time per invoke")
    ap.add_argument("--models", type=int, choices=(1, 2), default=1,
                    help="2: the camera runs a second model, in the same worker as the batch's")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgeapp-soak-") as tmp:
        models, images, video = setup(Path(tmp), args.delay_ms, args.models)
        soak = Soak(models, images, video, args.minutes * 60.0, random.Random(args.seed),
                    args.faults_per_minute)
        result = soak.run()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_report(result, args.minutes, args.seed)
    bad = result["batch"]["lost"] + result["batch"]["duplicated"] + result["camera"]["lost"] + \
        result["camera"]["duplicated"] + len(result["errors"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
