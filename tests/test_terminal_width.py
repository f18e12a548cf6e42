"""Output that fits an 80-column terminal: `edgeapp --help` gives each command's first sentence
whole (wrapped, never cut with "..."), and the `models list` and `bench` tables leave out their
least important columns (and say which) instead of running 150 columns wide."""

from __future__ import annotations

import re

import pytest
from cli_run import edgeapp, flat

WIDE = {"COLUMNS": "80"}


def commands_section(help_text: str) -> dict:
    """name -> its summary (wrapped lines joined) in a help's Commands section."""
    section = help_text.split("\nCommands:\n", 1)[1]
    found: dict = {}
    name = None
    for line in section.splitlines():
        m = re.match(r"^  (\S+)\s{2,}(.*)$", line)
        if m:
            name = m.group(1)
            found[name] = m.group(2)
        elif line.strip() and name:
            found[name] += " " + line.strip()
    return found


@pytest.mark.parametrize("group", [(), ("models",), ("compiler",)], ids=lambda g: " ".join(g) or "edgeapp")
def test_help_summaries_are_whole_sentences_within_80_columns(cli, group):
    r = edgeapp(*group, "--help", env=WIDE)
    assert r.returncode == 0, r.stderr
    too_wide = [ln for ln in r.stdout.splitlines() if len(ln) > 80]
    assert too_wide == []
    rows = commands_section(r.stdout)
    assert len(rows) >= 3
    for name, summary in rows.items():
        assert not summary.endswith("..."), (name, summary)
        if group == () and name in ("models", "compiler"):
            continue  # groups with a short help of their own
        own = flat(cli(*group, name, "--help").stdout)
        assert flat(summary) in own, (name, summary)  # the start of its own help, unabridged


def test_the_top_help_shows_what_each_summary_used_to_cut():
    rows = commands_section(edgeapp("--help", env=WIDE).stdout)
    assert rows["convert"].endswith("calibrated on your images")
    assert rows["classify"].endswith("or on the CPU when none is usable")
    assert rows["retrain"].endswith("without TensorFlow")


def test_models_list_fits_80_columns_and_names_what_it_left_out(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("models", "list")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "TASK"] and len(lines) > 10
    assert max(len(ln) for ln in lines) <= 80
    assert "FILES" not in lines[0] and "FILES" in r.stderr and "--format json" in r.stderr
    monkeypatch.setenv("COLUMNS", "300")
    wide = cli("models", "list")
    assert "FILES" in wide.stdout.splitlines()[0] and "left out" not in wide.stderr
    assert max(len(ln) for ln in wide.stdout.splitlines()) > 80  # the room is used when it is there


def test_bench_table_fits_80_columns(cli, tiny_model, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("bench", str(tiny_model), "--device", "cpu", "--runs", "3")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    header = next(ln for ln in lines if ln.startswith("device"))
    row = lines[lines.index(header) + 1]
    assert row.startswith("cpu") and len(row.split()) == len(header.replace("mean ms", "mean_ms")
                                                             .replace("first ms", "first_ms").split())
    for kept in ("mean ms", "p50", "p99", "inf/s"):
        assert kept in header
    assert "left out to fit 80 columns" in flat(r.stdout)
    monkeypatch.delenv("COLUMNS")  # piped output (not a terminal) keeps every column
    full = cli("bench", str(tiny_model), "--device", "cpu", "--runs", "3").stdout
    assert "mJ/inf" in full and "left out" not in full
