"""`bench --threads auto`: the CPU thread counts timed in interleaved rounds, the fastest chosen
by a robust statistic, and said to be within noise when it is.

Timing 1 thread, then 2, ... one after another lets the load of the moment decide: on a shared
machine one count got a stall of 113 ms among 0.43 ms inferences, its mean was 9× its median,
and the next count was called "best". Every count is opened and warmed up first; then the
runs are split into ROUNDS rounds, and in each round every count runs its share in turn (the
order rotates and alternates, so none always follows the same one). Each count's rounds are
reduced to their medians, and the best is the lowest median of round medians
(core/stats.fastest), compared round by round with the runner-up.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core import stats
from edgeapp.flows.bench.one_device import BenchOptions, DeviceResult, Timed, finish, ready, timed

ROUNDS = 7
REWARM = 2  # untimed inferences before each round's share (after another count's threads ran)


class ThreadSweep(TypedDict):
    """bench's `thread_sweep`: the fastest thread count of a device, and by how much."""
    device: str
    rounds: int
    chosen_by: str
    best_threads: Optional[int]
    best_ms: float
    runner_up_threads: Optional[int]
    runner_up_ms: float
    gap: Optional[float]
    best_won_rounds: int
    within_noise: bool


def shares(runs: int, duration: Optional[float], rounds: int = ROUNDS) -> list:
    """(runs, seconds) of each round: --runs split as evenly as possible, --duration in equal
    parts; fewer rounds than runs never (a round of no run measures nothing)."""
    if duration:
        return [(None, duration / rounds)] * rounds
    n = max(1, min(rounds, runs))
    return [(runs // n + (1 if i < runs % n else 0), None) for i in range(n)]


def turns(count: int, round_index: int) -> list:
    """The order the thread counts take in a round: rotated each round, reversed every other."""
    shift = round_index % count
    order = list(range(count))[shift:] + list(range(count))[:shift]
    return order[::-1] if round_index % 2 else order


def sweep(model, device: str, counts: list, opts: BenchOptions, progress=None) -> List[DeviceResult]:
    """One result per thread count, from interleaved rounds; each has `round_p50_ms`. A device
    that turned out to be an Edge TPU (auto) is measured once, as without a sweep."""
    first = ready(model, device, counts[0], opts)
    if isinstance(first, dict) or first.engine.device != "cpu":
        result = first if isinstance(first, dict) else finish(first, opts, timed(first, opts))
        if progress:
            progress(result)
        return [result]
    configs = [first] + [ready(model, device, n, opts) for n in counts[1:]]
    parts: list = [[] for _ in configs]
    rewarm = min(REWARM, opts.warmup)
    for i, (runs, seconds) in enumerate(shares(opts.runs, opts.duration)):
        for k in turns(len(configs), i):
            for _ in range(rewarm):
                configs[k].engine.invoke()
            parts[k].append(timed(configs[k], opts, runs, seconds))
    results = []
    for config, rounds in zip(configs, parts):
        result = finish(config, opts, _joined(rounds))
        result["round_p50_ms"] = [round(stats.median(t.latencies), 4) for t in rounds if len(t.latencies)]
        results.append(result)
        if progress:
            progress(result)
    return results


def _joined(rounds: list) -> Timed:
    """A count's rounds as one timed run: start times on its own clock (gaps left out), power
    weighted by each round's window (unknown if any round's is)."""
    starts, offset = [], 0.0
    for t in rounds:
        starts += [offset + s for s in t.starts]
        offset += t.window
    window = sum(t.window for t in rounds)
    known = all(t.watts is not None for t in rounds) and window > 0
    watts = sum(t.watts * t.window for t in rounds) / window if known else None
    return Timed(np.concatenate([t.latencies for t in rounds]), starts, window, watts, rounds[-1].meter)


def mark_best(results: List[DeviceResult]) -> Optional[ThreadSweep]:
    """With several thread counts on one device, flag the fastest by the median of its round
    medians; the `thread_sweep` section says by how much, and whether that is within noise."""
    groups: dict = {}
    for r in results:
        if r.get("available"):
            groups.setdefault(r.get("device_name") or r["device"], []).append(r)
    section: Optional[ThreadSweep] = None
    for name, rs in groups.items():
        if len(rs) < 2:
            continue
        verdict = stats.fastest([r.get("round_p50_ms") or [r["latency_ms"]["p50"]] for r in rs])
        for i, r in enumerate(rs):
            r["best"] = i == verdict.best
        best, other = rs[verdict.best], rs[verdict.runner_up]
        section = {"device": name, "rounds": verdict.rounds, "chosen_by": "median of round medians",
                   "best_threads": best["threads"], "best_ms": round(verdict.medians[verdict.best], 4),
                   "runner_up_threads": other["threads"],
                   "runner_up_ms": round(verdict.medians[verdict.runner_up], 4),
                   "gap": None if verdict.gap is None else round(verdict.gap, 4),
                   "best_won_rounds": verdict.wins, "within_noise": verdict.within_noise}
    return section


def sweep_note(section: dict) -> str:
    """One line for the table: the choice, and whether the runner-up is really slower."""
    s = section
    head = (f"--threads auto: {s['best_threads']} thread(s) best by the median of "
            f"{s['rounds']} interleaved rounds ({s['best_ms']:.3f} ms)")
    other = f"{s['runner_up_threads']} thread(s) at {s['runner_up_ms']:.3f} ms"
    gap = "" if s["gap"] is None else f", {s['gap']:+.1%}"
    faster = f"the best was faster in {s['best_won_rounds']} of {s['rounds']} rounds"
    if s["within_noise"]:
        return f"{head}; {other}{gap} is within noise ({faster}): either will do"
    return f"{head}; {other}{gap} ({faster})"
