"""`edgeapp retrain` end to end, as a user runs it: folders of generated colour photos, the tiny
extractors of retrain_models.py, then `edgeapp classify` on photos it never saw."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED, make_edgetpu_stand_in
from media import CLASSES, color_pixels, make_images, write_color_folders
from retrain_models import keras_extractor

from edgeapp.core.registry import digests
from edgeapp.errors import ExitCode


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch, tmp_path):
    """Embeddings, probe verdicts and pulled models go to this test's folder, never ~/.cache."""
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEAPP_NO_PROGRESS", "1")


@pytest.fixture(scope="module")
def extractor(tiny_keras, tiny_data, tmp_path_factory) -> Path:
    """The uint8 GAP extractor with its sidecar (preprocessing), alone in its folder."""
    return keras_extractor(tiny_keras, tiny_data / "train", tmp_path_factory.mktemp("base") / "gap.tflite")


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict:
    """Training photos (12 per class) and held-out photos (10 per class), 40x40 PNGs."""
    root = tmp_path_factory.mktemp("photos")
    return {"train": write_color_folders(root / "train", 12, seed=21, size=40),
            "new": write_color_folders(root / "new", 10, seed=22, size=40)}


def records(result) -> list:
    return [json.loads(line) for line in result.stdout.splitlines()]


def one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def retrain(cli, data, base, out, *extra):
    r = cli("retrain", data, "--base", base, "-o", out, "--format", "json", *extra)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), r


@pytest.mark.parametrize("method", ["imprint", "softmax"])
def test_retrained_model_classifies_new_photos(cli, extractor, photos, tmp_path, method):
    out = tmp_path / "mine.tflite"
    doc, r = retrain(cli, photos["train"], extractor, out, "--method", method)
    assert doc["classes"] == list(CLASSES) and doc["models"] == [str(out)]
    assert doc["images"] == {"total": 36, "used": 36, "train": 30, "val": 6, "skipped": 0,
                             "extracted": 36, "cached": 0}
    assert doc["val_accuracy"] == 1.0 and np.trace(doc["confusion"]) == 6
    assert [c["val"] for c in doc["per_class"]] == [2, 2, 2]
    side = json.loads(Path(doc["sidecar"]).read_text())
    assert side["labels"] == list(CLASSES) and side["task"] == "classify"
    base_side = json.loads(extractor.with_suffix(".json").read_text())
    assert side["preprocessing"] == base_side["preprocessing"]  # the extractor's own
    got = cli("classify", out, photos["new"], "--format", "jsonl", "-k", "1")
    assert got.exit_code == 0, got.stderr
    recs = records(got)
    assert len(recs) == 30
    assert all(rec["classes"][0]["label"] == Path(rec["path"]).parent.name for rec in recs)
    if method == "softmax":
        assert doc["training"]["epochs"] >= doc["training"]["best_epoch"] >= 1


def test_the_python_api_takes_a_retrained_model(cli, extractor, photos, tmp_path):
    import edgeapp

    retrain(cli, photos["train"], extractor, tmp_path / "mine.tflite", "-m", "softmax")
    model = edgeapp.open_model(tmp_path / "mine.tflite", device="cpu")
    assert model.labels == dict(enumerate(CLASSES))
    for name in CLASSES:
        image = next((photos["new"] / name).iterdir())
        assert model.classify(image, top_k=1)[0]["label"] == name


def test_cached_embeddings_are_not_reused_when_the_preprocessing_changes(cli, extractor, photos, tmp_path):
    """An embedding depends on how the photos were prepared as much as on the model's bytes: a
    sidecar whose normalization or decode changed (the .tflite unchanged) recomputes them all."""
    base = tmp_path / "base" / extractor.name
    base.parent.mkdir()
    shutil.copy(extractor, base)
    shutil.copy(extractor.with_suffix(".json"), base.with_suffix(".json"))
    retrain(cli, photos["train"], base, tmp_path / "a.tflite")  # fills the cache
    doc, _ = retrain(cli, photos["train"], base, tmp_path / "b.tflite")
    assert (doc["images"]["cached"], doc["images"]["extracted"]) == (36, 0)
    sidecar = json.loads(base.with_suffix(".json").read_text())
    pre = sidecar.setdefault("preprocessing", {})
    pre["decode"] = "full" if pre.get("decode") == "scaled" else "scaled"
    base.with_suffix(".json").write_text(json.dumps(sidecar))
    doc, _ = retrain(cli, photos["train"], base, tmp_path / "c.tflite")
    assert (doc["images"]["cached"], doc["images"]["extracted"]) == (0, 36)
    pre["std"] = (pre.get("std") or 1.0) * 2
    base.with_suffix(".json").write_text(json.dumps(sidecar))
    doc, _ = retrain(cli, photos["train"], base, tmp_path / "d.tflite")
    assert (doc["images"]["cached"], doc["images"]["extracted"]) == (0, 36)


def test_retraining_is_deterministic(cli, extractor, photos, tmp_path):
    """The same photos give the same bytes: from fresh embeddings, from cached ones, with SGD."""
    for method in ("imprint", "softmax"):
        a, b, c = (tmp_path / f"{method}_{i}.tflite" for i in "abc")
        retrain(cli, photos["train"], extractor, a, "-m", method, "--no-cache")
        retrain(cli, photos["train"], extractor, b, "-m", method)  # fills the cache
        doc, _ = retrain(cli, photos["train"], extractor, c, "-m", method)  # reads it
        assert doc["images"]["cached"] == 36 and doc["images"]["extracted"] == 0
        assert a.read_bytes() == b.read_bytes() == c.read_bytes()
        assert a.with_suffix(".json").read_text() == c.with_suffix(".json").read_text()


def test_bad_photos_are_reported_and_skipped(cli, extractor, photos, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(photos["train"], data)
    (data / "red" / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    (data / "blue" / "notes.txt").write_text("not an image suffix: not even looked at")
    doc, r = retrain(cli, data, extractor, tmp_path / "mine.tflite")
    assert doc["images"]["skipped"] == 1 and doc["images"]["used"] == 36
    assert doc["skipped"][0]["path"].endswith("broken.jpg")
    assert "skipping" in r.stderr and "broken.jpg" in r.stderr and "1 image(s) skipped" in r.stderr


@pytest.mark.parametrize("layout, message", [
    ({"red": 3}, "needs at least 2 class sub-folders (one per class), found only 'red'"),
    ({}, "needs at least 2 class sub-folders"),
    ({"red": 3, "blue": 0}, "class 'blue'"),
    ({"red": 3, "blue": -2}, "class 'blue' has no image the base can read (2 skipped)"),
])
def test_refusals_are_one_line(cli, extractor, tmp_path, layout, message):
    """Fewer than two classes, an empty class, a class whose every photo is unreadable."""
    rng = np.random.default_rng(0)
    from PIL import Image

    for name, n in layout.items():
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(abs(n)):
            p = tmp_path / "data" / name / f"{i}.png"
            if n > 0:
                Image.fromarray(color_pixels(CLASSES.index(name), rng, 20)).save(p)
            else:
                p.write_bytes(b"not a png")
    (tmp_path / "data").mkdir(exist_ok=True)
    r = cli("retrain", tmp_path / "data", "--base", extractor, "-o", tmp_path / "mine.tflite")
    assert r.exit_code == ExitCode.USAGE and message in one_error_line(r)
    assert not (tmp_path / "mine.tflite").exists()


def test_a_classifier_is_not_a_base(cli, tiny_model, photos, tmp_path):
    r = cli("retrain", photos["train"], "--base", tiny_model, "-o", tmp_path / "mine.tflite")
    assert r.exit_code == ExitCode.MODEL_INVALID
    assert "outputs class scores, not an embedding" in one_error_line(r)


def test_output_names_follow_the_base(cli, extractor, photos, tmp_path):
    r = cli("retrain", photos["train"], "--base", extractor, "-o", tmp_path / "mine_edgetpu.tflite")
    assert r.exit_code == ExitCode.USAGE and "name it mine.tflite" in one_error_line(r)
    r = cli("retrain", photos["train"], "--base", extractor, "-o", extractor)
    assert r.exit_code == ExitCode.USAGE and "would overwrite the base" in one_error_line(r)
    r = cli("retrain", tmp_path / "nowhere", "--base", extractor, "-o", tmp_path / "m.tflite")
    assert r.exit_code == ExitCode.USAGE and "is not a folder" in one_error_line(r)


def compiled_base(extractor: Path, folder: Path) -> Path:
    """gap_edgetpu.tflite (a stand-in compiled build) with its CPU twin and sidecar beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(extractor, folder / "gap.tflite")
    shutil.copy(extractor.with_suffix(".json"), folder / "gap.json")
    return make_edgetpu_stand_in(extractor, folder / "gap_edgetpu.tflite")


def add_photos(folder: Path, n: int, seed: int) -> None:
    make_images(folder, [CLASSES[i % 3] for i in range(n)], size=40, seed=seed,
                name=f"{{colour}}/added_{seed}_{{i}}")


def test_adding_photos_costs_one_extraction_each(cli, tpus, extractor, photos, tmp_path):
    """Counted by the Edge TPU itself: the stand-in fails every invoke after the N it is allowed
    (FAKE_EDGETPU_FAIL), and --device usb:0 has no CPU to fall back on."""
    base = compiled_base(extractor, tmp_path / "base")
    data = tmp_path / "data"
    shutil.copytree(photos["train"], data)
    tpus("usb", fail="usb:0@36")  # exactly the 36 photos
    doc, r = retrain(cli, data, base, tmp_path / "mine.tflite", "--device", "usb:0")
    assert doc["images"]["extracted"] == 36 and doc["device"] == "usb:0"
    assert doc["models"] == [str(tmp_path / "mine_edgetpu.tflite"), str(tmp_path / "mine.tflite")]
    add_photos(data, 10, seed=5)
    tpus("usb", fail="usb:0@10")  # ten new photos: ten invokes are enough
    doc, _ = retrain(cli, data, base, tmp_path / "mine.tflite", "--device", "usb:0")
    assert (doc["images"]["extracted"], doc["images"]["cached"]) == (10, 36)
    add_photos(data, 1, seed=6)
    tpus("usb", fail="usb:0@0")  # the budget is real: one new photo and no invoke allowed fails
    r = cli("retrain", data, "--base", base, "-o", tmp_path / "other.tflite", "--device", "usb:0")
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE, r.stderr
    # the retrained pair runs: the head on the CPU after the (stand-in) Edge TPU
    tpus("usb")
    got = cli("classify", tmp_path / "mine_edgetpu.tflite", photos["new"], "--format", "jsonl",
              "--device", "usb:0", "-k", "3")
    assert got.exit_code == 0, got.stderr
    recs = records(got)
    assert all(r["device"] == "usb:0" and {c["label"] for c in r["classes"]} == set(CLASSES)
               for r in recs)
    assert all(abs(sum(c["score"] for c in r["classes"]) - 1) < 0.02 for r in recs)


def test_check_and_the_cpu_twin_of_a_retrained_compiled_model(cli, tpus, extractor, photos,
                                                              tmp_path):
    base = compiled_base(extractor, tmp_path / "base")
    tpus("none")  # no Edge TPU: extraction falls back to the CPU twin, both files are written
    doc, r = retrain(cli, photos["train"], base, tmp_path / "mine.tflite")
    assert doc["device"] == "cpu" and "CPU" in r.stderr
    report = json.loads(cli("check", tmp_path / "mine_edgetpu.tflite", "--format", "json").stdout)
    assert [(o["op"], o["mapped"]) for o in report["ops"]] == [
        ("edgetpu-custom-op", True), ("L2_NORMALIZATION", False), ("FULLY_CONNECTED", False),
        ("SOFTMAX", False)]
    # the fallback runs the retrained CPU twin, and it is right: it was trained on its own embeddings
    got = cli("classify", tmp_path / "mine_edgetpu.tflite", photos["new"], "--format", "jsonl",
              "-k", "1")
    assert got.exit_code == 0 and "mine.tflite" in got.stderr
    assert all(r["classes"][0]["label"] == Path(r["path"]).parent.name for r in records(got))


def test_base_by_registry_name(cli, extractor, photos, tmp_path, monkeypatch):
    """`--base NAME` resolves through the model registry (here our own, served from a folder)."""
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(extractor, served / "gap.tflite")
    size, sha256, git = digests(served / "gap.tflite")
    registry = {"edgeapp_registry": 1, "source": "test", "commit": "0" * 40,
                "url_template": f"file://{served}/{{path}}",
                "models": {"gap_embedding": {"task": "embed", "input": [16, 16], "cpu": "gap.tflite",
                                             "edgetpu": None, "labels": None,
                                             "preprocessing": {"mean": 0.0, "std": 255.0}}},
                "files": {"gap.tflite": {"size": size, "sha256": sha256, "git_blob_sha1": git}}}
    (tmp_path / "registry.json").write_text(json.dumps(registry))
    monkeypatch.setenv("EDGEAPP_MODELS_REGISTRY", str(tmp_path / "registry.json"))
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(tmp_path / "sysroot"))
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "absent" / "libedgetpu.so.1"))
    listed = cli("models", "list", "--task", "embed", "--format", "json")
    assert [m["name"] for m in json.loads(listed.stdout)["models"]] == ["gap_embedding"]
    doc, _ = retrain(cli, photos["train"], "gap_embedding", tmp_path / "mine.tflite")
    assert doc["val_accuracy"] == 1.0
    assert json.loads((tmp_path / "mine.json").read_text())["retrain"]["base"] == "gap_embedding"


@pytest.mark.shared
def test_coral_extractor_by_name(cli, photos, tmp_path, monkeypatch):
    """mobilenet_v1_embedding from the shipped registry, pulled from ../shared/coral, on the CPU."""
    monkeypatch.setenv("EDGEAPP_MODELS_URL", f"file://{SHARED}/{{path}}")
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(tmp_path / "sysroot"))
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "absent" / "libedgetpu.so.1"))
    doc, r = retrain(cli, photos["train"], "mobilenet_v1_embedding", tmp_path / "mine.tflite")
    assert doc["val_accuracy"] == 1.0 and doc["images"]["extracted"] == 36
    got = cli("classify", tmp_path / "mine.tflite", photos["new"], "--format", "jsonl", "-k", "1")
    assert all(r["classes"][0]["label"] == Path(r["path"]).parent.name for r in records(got))


def test_a_worker_lost_while_extracting_is_counted_and_trains_the_same_head(extractor, photos, tmp_path):
    """On an Edge TPU the extractor runs in a worker (docs/recovery.md): one lost while the
    embeddings are extracted is replaced, every photo is still used, and the report counts it."""
    import os
    import signal

    from worker_procs import set_aside_earlier_workers, workers_of_this_process

    from edgeapp.flows.open_task import Placement, open_task
    from edgeapp.flows.retrain import retrain as retrain_flow
    from edgeapp.hw.runtime import EngineOptions
    from edgeapp.tasks.internal.embed import EMBED_TASK

    place = Placement("cpu", EngineOptions(isolate=True))

    def run(out: Path, kill_at: int = 0) -> dict:
        set_aside_earlier_workers()
        done = [0]

        def progress() -> None:
            done[0] += 1
            if done[0] == kill_at:
                os.kill(workers_of_this_process()[0], signal.SIGKILL)

        said: list = []
        with open_task(extractor, EMBED_TASK, place) as opened:
            doc = retrain_flow(opened.runner, photos["train"], out, workers=0, progress=progress,
                               on_notice=said.append)
        return {**doc, "said": said}

    clean = run(tmp_path / "clean" / "head.tflite")
    hit = run(tmp_path / "hit" / "head.tflite", kill_at=5)
    assert "engine" not in clean
    assert hit["engine"]["engine_lost"] == 1 and hit["engine"]["engine_recovered"] == 1
    assert any(line.startswith("engine lost 1 time(s)") for line in hit["said"]), hit["said"]
    assert hit["images"] == clean["images"] and hit["val_accuracy"] == clean["val_accuracy"]
    assert (tmp_path / "hit" / "head.tflite").read_bytes() == (tmp_path / "clean" / "head.tflite").read_bytes()
