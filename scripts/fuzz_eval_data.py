#!/usr/bin/env python3
"""Fuzz `edgeapp eval`'s labelled-data readers: mutate small COCO JSON, YOLO (data.yaml, label
files, classes.txt) and segmentation-mask datasets, run `eval` on each, and classify every run:

  ok            exit 0 with the clean metric where the mutation must not change it (or any
                metric where it may), or exit 2/4/7 with one line where the data is wrong
  exit 3        images left out, said, the others measured
  internal      exit 1, a traceback, a signal, or a message over one line
  hang          no end within --timeout seconds (the run is killed)
  wrong metric  exit 0 where the data must be refused or an image left out, or exit 0 with
                another metric than the clean run's where the mutation changes nothing
  refused       valid data (a mutation that changes nothing) not measured: exit 2 or 3

Each run is a fresh process: forked from this one after edgeapp, the runtime and the COCO
evaluator are imported (the same `edgeapp` command line, without paying the imports 1,000
times), its stdout and stderr in files, its address space capped (--memory-gb) so that a
reader allocating without bound fails as it would on a small board.

    python scripts/fuzz_eval_data.py --seed 1 --count 1000 --jobs 2 --out fuzz.json

Needs the dev install (the int8 YOLO fixture of tests/fixtures/yolo; the segmentation stand-in
of tests/posesegment_models.py is converted once with TensorFlow and kept under --work). The
datasets and mutations are scripts/fuzz_eval_mutations.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]
from fuzz_eval_mutations import MUTATIONS, build_bases, data_argument, seg_model  # noqa: E402

YOLO_MODEL = ROOT / "tests" / "fixtures" / "yolo" / "yolov8_256_full_integer_quant.tflite"
METRIC = {"detection": "map", "segmentation": "miou"}
BAD = ("internal", "hang", "wrong metric", "refused")

# ----------------------------------------------------------------------------- running


def start(args: List[str], out: Path, memory_gb: float) -> int:
    """Fork a child running `edgeapp ARGS` with stdout/stderr in out.{stdout,stderr}."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        limit = int(memory_gb * 1024 ** 3)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        for fd, suffix in ((1, "stdout"), (2, "stderr")):
            f = os.open(str(out.with_suffix("." + suffix)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        sys.stdout = os.fdopen(1, "w")
        sys.stderr = os.fdopen(2, "w")
        sys.argv = ["edgeapp"] + args
        from edgeapp.cli.app import main
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)


def classify(rc, stdout: str, stderr: str, expect: str, clean: float, family: str, kind: str) -> str:
    """One run's class (see the module's docstring)."""
    if rc is None:
        return "hang"
    lines = [line for line in stderr.splitlines() if line.strip()]
    noise = [line for line in lines if not line.startswith("edgeapp: ")]
    if rc == 1 or rc < 0 or "Traceback" in stderr or noise or rc not in (0, 2, 3, 4, 7):
        return "internal"
    if rc == 0:
        if expect in ("refuse", "leave out"):
            return "wrong metric"
        if expect == "same":
            try:
                value = json.loads(stdout)["models"][0]["metrics"][METRIC[kind]]
            except (ValueError, KeyError, IndexError):
                return "internal"
            if abs(value - clean) > 1e-9:
                return "wrong metric"
        return "ok"
    if expect == "same":
        return "refused"
    if rc == 3:
        return "exit 3"
    errors = [line for line in lines if "error" in line]
    return "ok" if len(errors) == 1 else "internal"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per run")
    ap.add_argument("--memory-gb", type=float, default=6.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/fuzz_eval_data"))
    ap.add_argument("--out", type=Path, default=None, help="JSON summary and every run")
    ap.add_argument("--seg-model", type=Path, default=None,
                    help="the segmentation stand-in already converted (else converted into --work)")
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args.work.mkdir(parents=True, exist_ok=True)
    bases = build_bases(args.work)
    models = {"detection": YOLO_MODEL, "segmentation": args.seg_model or seg_model(args.work)}
    import edgeapp.cli.app  # noqa: F401  imported once here, inherited by every forked run
    import edgeapp.cli.eval  # noqa: F401
    import edgeapp.flows.evaluate  # noqa: F401
    from edgeapp.core.eval.coco import cocotools
    from edgeapp.hw.runtime import RUNTIME_MODULES  # noqa: F401

    cocotools()
    runs_dir = args.work / f"runs-{args.seed}"
    shutil.rmtree(runs_dir, ignore_errors=True)
    runs_dir.mkdir()
    cases = [("coco", "coco", "detection"), ("labels", "yaml", "detection"), ("yaml", "yaml", "detection"),
             ("labels", "folder", "detection"), ("classes", "folder", "detection"),
             ("masks", "masks", "segmentation")]
    clean = {}
    for family, base, kind in cases:  # the clean metric of each base
        out = runs_dir / f"clean-{base}"
        arg = data_argument(family, base, bases[base])
        pid = start(["eval", str(models[kind]), "--data", str(arg), "--format", "json", "--no-probe"],
                    out, args.memory_gb)
        _, status = os.waitpid(pid, 0)
        text = out.with_suffix(".stdout").read_text()
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"clean {base} failed: {out.with_suffix('.stderr').read_text()}")
        clean[base] = json.loads(text)["models"][0]["metrics"][METRIC[kind]]
    print(f"clean metrics: {clean}", flush=True)
    rng = random.Random(args.seed)
    plan = []
    for n in range(args.count):
        family, base, kind = rng.choice(cases)
        plan.append((n, family, base, kind, rng.choice(MUTATIONS[family]), rng.randrange(2 ** 32)))
    results, running = [], {}
    started = time.time()
    todo = list(plan)
    while todo or running:
        while todo and len(running) < args.jobs:
            n, family, base, kind, mutate, seed = todo.pop(0)
            folder = runs_dir / f"{n:05d}"
            shutil.copytree(bases[base], folder, symlinks=True)
            expect = mutate(random.Random(seed), folder)
            if base == "masks" and (folder / "classes.txt").exists():
                (folder / "classes.txt").rename(folder / "labels.txt")
            arg = data_argument(family, base, folder)
            pid = start(["eval", str(models[kind]), "--data", str(arg), "--format", "json", "--no-probe"],
                        folder / "run", args.memory_gb)
            running[pid] = (n, family, base, kind, mutate.__name__, expect, folder, time.time())
        time.sleep(0.05)
        for pid, (n, family, base, kind, name, expect, folder, t0) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done and time.time() - t0 < args.timeout:
                continue
            if not done:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                rc = None
            else:
                rc = os.waitstatus_to_exitcode(status)
            del running[pid]
            stdout = (folder / "run.stdout").read_text(errors="replace")
            stderr = (folder / "run.stderr").read_text(errors="replace")
            verdict = classify(rc, stdout, stderr, expect, clean[base], family, kind)
            results.append({"run": n, "data": base, "mutation": name, "expect": expect, "exit": rc,
                            "class": verdict, "seconds": round(time.time() - t0, 2),
                            "stderr": stderr.strip().splitlines()[-3:]})
            if verdict in BAD:
                print(f"{verdict}: run {n} {base} {name} (exit {rc}): {stderr.strip()[-300:]}", flush=True)
            else:
                shutil.rmtree(folder, ignore_errors=True)
            if len(results) % 50 == 0:
                print(f"{len(results)}/{args.count} runs, {time.time() - started:.0f} s", flush=True)
    counts: Dict[str, int] = {}
    for r in results:
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    summary = {"seed": args.seed, "count": args.count, "classes": counts, "clean": clean,
               "mutations": len({r["mutation"] for r in results}),
               "seconds": round(time.time() - started, 1)}
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "runs": sorted(results, key=lambda r: r["run"])},
                                       indent=1))
    bad = sum(counts.get(k, 0) for k in BAD)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
