"""Coral's models by name (`edgeapp models`, MODEL as a name): one line saying a name runs on
the CPU, what `models list` calls cached, and the models that need a custom operator.
"""

from __future__ import annotations

import json
import re

from conftest import make_edgetpu_stand_in
from model_server_fixtures import registry_doc


def test_a_model_by_name_says_once_that_it_runs_on_the_cpu(cli, env, color_images):
    r = cli("classify", "colors", color_images["red"], "-k", "1")
    assert r.exit_code == 0, r.stderr
    on_cpu = [ln for ln in r.stderr.splitlines() if "on CPU" in ln]
    assert on_cpu == ["edgeapp: no Edge TPU found: running colors.tflite (Coral's CPU build of "
                      "colors) on CPU"], r.stderr


def test_a_shared_labels_file_makes_no_model_cached(cli, env):
    assert cli("models", "pull", "colors_pipeline2").exit_code == 0  # its labels are colors' too
    r = cli("models", "list", "--format", "json")
    models = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    colors = models["colors"]
    assert colors["cached"] is False and colors["cached_models"] == []
    assert [f["cached"] for f in colors["files"]] == [False, False, True]  # the labels only
    assert models["colors_pipeline2"]["cached"] is True
    for m in models.values():
        assert isinstance(m["cached"], bool) and all(isinstance(f["cached"], bool) for f in m["files"])
    row = next(ln for ln in cli("models", "list").stdout.splitlines() if ln.startswith("colors "))
    assert re.search(r"B\s+-\s+-\s+SHA-256", row), row  # SIZE, then PUBLISHED and CACHED "-"
    assert cli("models", "pull", "colors", "--cpu-only").exit_code == 0
    row = next(ln for ln in cli("models", "list").stdout.splitlines() if ln.startswith("colors "))
    assert " cpu " in row


def test_models_needing_a_custom_op_are_named_by_list_and_pull(cli, env, server, tiny_model,
                                                                tmp_path):
    posenet = make_edgetpu_stand_in(tiny_model, tmp_path / "posenet.tflite", "PosenetDecoderOp")
    server.files["posenet.tflite"] = posenet.read_bytes()
    models = {**env["models"], "toy_posenet": {"task": "pose", "cpu": "posenet.tflite"}}
    env["registry"].write_text(json.dumps(registry_doc(server.files, models)))
    r = cli("models", "pull", "toy_posenet", "--cpu-only")
    assert r.exit_code == 0, r.stderr
    (warning,) = [ln for ln in r.stderr.splitlines() if "warning:" in ln]
    assert "toy_posenet needs the custom operator(s) PosenetDecoderOp" in warning
    assert "`edgeapp pose` will refuse it" in warning and "MoveNet" in warning
    r = cli("models", "list", "--format", "json")
    needs = {m["name"]: m["needs_ops"] for m in json.loads(r.stdout)["models"]}
    assert needs["toy_posenet"] == ["PosenetDecoderOp"] and needs["colors"] == []
    assert "note: toy_posenet needs" in cli("models", "list").stderr


def test_the_shipped_registry_says_which_models_need_posenets_op():
    from edgeapp.core.registry import load_registry

    reg = load_registry()
    needing = {name for name, e in reg.models.items() if e.custom_ops}
    assert needing == {name for name in reg.models if name.startswith("posenet_")}
    assert all(reg.models[n].custom_ops == ("PosenetDecoderOp",) for n in needing)
