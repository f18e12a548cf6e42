"""A fixed-seed sample of the model fuzzer (scripts/fuzz_models.py) over the suite's own models.

100 mutants of the converted classifier and two detection models, each through classify,
detect, check and bench: none may crash, show a traceback or hang. The table in
docs/containment.md (Model fuzzing) comes from the full run (2,000 mutants, more base models).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import detection_models

ROOT = Path(__file__).resolve().parent.parent


def _fuzzer():
    spec = importlib.util.spec_from_file_location("fuzz_models", ROOT / "scripts" / "fuzz_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_models"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_mutants_are_a_function_of_seed_and_index(tiny_model):
    fuzz = _fuzzer()
    data = {"classifier": tiny_model.read_bytes()}
    layouts = {"classifier": fuzz.layout_of(data["classifier"])}
    kinds = list(fuzz.MUTATIONS)
    first = [fuzz.make_mutant(3, i, data, layouts, kinds) for i in range(30)]
    again = [fuzz.make_mutant(3, i, data, layouts, kinds) for i in range(30)]
    assert [m.data for m in first] == [m.data for m in again]
    assert all(m.data != data["classifier"] for m in first)
    assert len({m.kind for m in first}) > 8  # byte-level and structure-aware kinds alike
    other_seed = [fuzz.make_mutant(4, i, data, layouts, kinds).data for i in range(30)]
    assert other_seed != [m.data for m in first]


def test_fixed_seed_sample_has_no_crash_traceback_or_hang(tiny_model, tmp_path_factory, tmp_path):
    det = detection_models.build(tmp_path_factory)
    bases = {"classifier": tiny_model, "det_op_uint8": det["det_op_uint8"], "det_tf1": det["det_tf1"]}
    cmd = [sys.executable, str(ROOT / "scripts" / "fuzz_models.py"), "--mutants", "100", "--seed", "11",
           "--jobs", "2", "--work", str(tmp_path), "--json", str(tmp_path / "runs.json")]
    for name, path in bases.items():
        cmd += ["--base", f"{name}={path}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    mutants = json.loads((tmp_path / "runs.json").read_text())
    outcomes = Counter(run["outcome"] for m in mutants for run in m["runs"])
    assert len(mutants) == 100 and sum(outcomes.values()) == 400
    assert outcomes["CRASH"] == outcomes["TRACEBACK"] == outcomes["HANG"] == 0, outcomes
    assert outcomes["OK"] > 0 and outcomes["CLEAN-ERROR"] > 0, outcomes
