"""`bench --threads auto`: thread counts timed in interleaved rounds, the best chosen by the
median of round medians (never by a mean one stall can move), and "within noise" said when the
runner-up is not really slower. The statistics are checked with exact values; the command end to
end on the converted tiny model (no timing assertions)."""

import json

import pytest

from edgeapp.core import stats
from edgeapp.flows.bench.threads import ROUNDS, mark_best, shares, sweep_note, turns
from edgeapp.hw.hostinfo import usable_cores


def test_one_stall_does_not_choose_the_best():
    """The run the issue saw: 1 thread p50 0.434 ms but one 113 ms stall (mean 5.16 ms), 2 threads
    p50 0.441 ms. By the mean 2 threads were "9x faster"; by round medians 1 thread is best and
    the two are within noise."""
    one = [0.434, 0.433, 0.436, 0.435, 0.434, 0.432, 0.437]
    two = [0.441, 0.440, 0.431, 0.442, 0.439, 0.443, 0.430]
    verdict = stats.fastest([one, two])
    assert (verdict.best, verdict.runner_up) == (0, 1)
    assert verdict.medians == (0.434, 0.440)
    assert verdict.wins == 5 and verdict.rounds == 7
    assert verdict.gap == pytest.approx(0.440 / 0.434 - 1)
    assert verdict.within_noise  # 1.4% apart

    slow = [0.9, 0.95, 0.88, 0.91, 0.9, 0.93, 0.2]  # 2x slower in 6 of 7 rounds
    verdict = stats.fastest([one, slow])
    assert verdict.best == 0 and verdict.wins == 6 and not verdict.within_noise
    close_but_not_steady = [0.5, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3]  # median 0.5, wins only 4 of 7
    assert stats.fastest([one, close_but_not_steady]).within_noise
    assert stats.fastest([[1.0]]).runner_up is None


def _row(threads, mean, p50, rounds):
    return {"device": "cpu", "device_name": "cpu", "available": True, "threads": threads,
            "latency_ms": {"mean": mean, "p50": p50}, "round_p50_ms": rounds}


def test_mark_best_goes_by_round_medians_not_by_the_mean():
    rows = [_row(1, 5.16, 0.434, [0.434, 0.433, 0.436, 0.435, 0.434, 0.432, 0.437]),
            _row(2, 0.565, 0.441, [0.441, 0.440, 0.431, 0.442, 0.439, 0.443, 0.430])]
    section = mark_best(rows)
    assert [r["best"] for r in rows] == [True, False]
    assert section["best_threads"] == 1 and section["runner_up_threads"] == 2
    assert section["within_noise"] and section["rounds"] == 7 and section["best_won_rounds"] == 5
    note = sweep_note(section)
    assert "1 thread(s) best by the median of 7 interleaved rounds (0.434 ms)" in note
    assert "2 thread(s) at 0.440 ms, +1.4% is within noise (the best was faster in 5 of 7" in note


def test_rounds_split_the_runs_and_take_turns():
    assert shares(100, None) == [(15, None), (15, None), (14, None), (14, None), (14, None),
                                 (14, None), (14, None)]
    assert sum(n for n, _ in shares(100, None)) == 100
    assert shares(3, None) == [(1, None)] * 3
    assert shares(10, 3.5) == [(None, 0.5)] * 7
    orders = [turns(3, i) for i in range(6)]
    assert all(sorted(o) == [0, 1, 2] for o in orders)
    assert orders == [[0, 1, 2], [0, 2, 1], [2, 0, 1], [2, 1, 0], [1, 2, 0], [1, 0, 2]]
    for k in range(3):  # every count runs first, and is not always preceded by the same one
        assert any(o[0] == k for o in orders)
        before = {o[o.index(k) - 1] for o in orders if o.index(k) > 0}
        assert len(before) == 2


def test_threads_auto_end_to_end(cli, tiny_model, bench_env):
    r = cli("bench", tiny_model, "-d", "cpu", "--threads", "auto", "--runs", "21", "--warmup", "2",
            "-f", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    cpus = doc["results"]
    assert [c["threads"] for c in cpus] == list(range(1, usable_cores() + 1))
    assert all(c["runs"] == 21 for c in cpus)
    if len(cpus) < 2:
        pytest.skip("one usable core: no sweep to choose from")
    assert all(len(c["round_p50_ms"]) == ROUNDS for c in cpus)
    verdict = stats.fastest([c["round_p50_ms"] for c in cpus])
    assert [c["best"] for c in cpus] == [i == verdict.best for i in range(len(cpus))]
    sweep = doc["thread_sweep"]
    assert sweep["rounds"] == ROUNDS and sweep["within_noise"] == verdict.within_noise
    assert sweep["best_threads"] == cpus[verdict.best]["threads"]
    table = cli("bench", tiny_model, "-d", "cpu", "--threads", "auto", "--runs", "14")
    assert table.exit_code == 0, table.stderr
    assert "interleaved rounds" in table.stdout and "<- best" in table.stdout


def test_a_duration_sweep_keeps_its_windows(cli, tiny_model, bench_env):
    if usable_cores() < 2:
        pytest.skip("one usable core: no sweep")
    r = cli("bench", tiny_model, "-d", "cpu", "--threads", "auto", "--duration", "0.7", "--warmup", "1",
            "-f", "json")
    assert r.exit_code == 0, r.stderr
    for c in json.loads(r.stdout)["results"]:
        assert len(c["round_p50_ms"]) == ROUNDS
        starts = [w["start_s"] for w in c.get("windows", [])]
        assert starts == sorted(starts)
