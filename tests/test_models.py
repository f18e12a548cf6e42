"""`edgeapp models` and model names as MODEL, through the CLI, against a real HTTP server.

The server (tests/model_server_fixtures.py: http.server on 127.0.0.1, in a thread) serves
files under /MODE/PATH: `ok` (with Range requests), `norange`, `truncated`, `wrong` (same
length, other bytes), `404`, `500`, `slow`, `cut` (the first request of a file stops half-way),
`cutalways` and `stall` (headers, then silence). Requests with an absolute URI are served too, as a forward proxy would.

The registry is ours (EDGEAPP_MODELS_REGISTRY) over models made by the tests' own `convert`,
with hashes computed here by hashlib; EDGEAPP_MODELS_URL picks the server and the mode. Tests
marked `shared` use the package's registry and Coral's real files from ../shared/coral.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, SHARED, tflite_schema
from media import CLASSES
from model_server_fixtures import PROXY_VARS, registry_doc

from edgeapp.errors import ExitCode

INDEX = ROOT.parent / "shared" / "coral-test-data-index.json"



def one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def attach_usb_accelerator(root: Path) -> None:
    d = root / "sys/bus/usb/devices/2-1"
    d.mkdir(parents=True)
    for name, value in {"idVendor": "18d1", "idProduct": "9302", "busnum": "2", "devnum": "3",
                        "speed": "5000"}.items():
        (d / name).write_text(value + "\n")


# --- pull, verify, cache -----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["sha256", "git"])
def test_pull_verifies_writes_the_sidecar_and_then_hits_the_cache(cli, env, server, how):
    env["registry"].write_text(json.dumps(registry_doc(env["files"], env["models"], how)))
    r = cli("models", "pull", "colors", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)["models"][0]
    by_role = {f["role"]: f for f in doc["files"]}
    assert set(by_role) == {"cpu", "edgetpu", "labels"}
    for role, name in (("cpu", "colors.tflite"), ("edgetpu", "colors_edgetpu.tflite"),
                       ("labels", "colors_labels.txt")):
        local = Path(by_role[role]["path"])
        assert local == env["cache"] / name and local.read_bytes() == env["files"][name]
        assert by_role[role]["how"] == "downloaded" and by_role[role]["verified_by"] == how
    assert not list(env["cache"].glob("*.part"))
    side = json.loads(Path(doc["sidecar"]).read_text())
    assert side["labels"] == list(CLASSES) and side["task"] == "classify"
    assert side["preprocessing"] == env["models"]["colors"]["preprocessing"]

    n = len(server.requests)
    again = cli("models", "pull", "colors", "--format", "json")
    assert again.exit_code == 0
    assert {f["how"] for f in json.loads(again.stdout)["models"][0]["files"]} == {"cached"}
    assert len(server.requests) == n  # a cache hit asks the network nothing


def test_list_shows_verification_size_and_cache(cli, env):
    env["registry"].write_text(json.dumps(registry_doc(
        {**env["files"], "colors_edgetpu.tflite": env["files"]["colors_edgetpu.tflite"]},
        env["models"])))
    doc = json.loads(env["registry"].read_text())
    del doc["files"]["colors_edgetpu.tflite"]["sha256"]  # only a git id for the compiled twin
    del doc["files"]["colors_edgetpu.tflite"]["size"]
    env["registry"].write_text(json.dumps(doc))
    r = cli("models", "list", "--format", "json", "--task", "classify")
    assert r.exit_code == 0, r.stderr
    models = {m["name"]: m for m in json.loads(r.stdout)["models"]}
    assert set(models) == {"colors", "colors_pipeline2"}  # --task classify
    colors = models["colors"]
    assert {f["role"]: f["verified_by"] for f in colors["files"]} == {
        "cpu": "sha256", "edgetpu": "git", "labels": "sha256"}
    assert colors["size"] is None and colors["cached"] is False and colors["input"] == [16, 16]
    assert cli("models", "pull", "colors", "--cpu-only").exit_code == 0
    table = cli("models", "list").stdout
    row = next(line for line in table.splitlines() if line.startswith("colors "))
    assert " cpu " in row and "SHA-256; git id: edgetpu" in row
    assert "colors{,_edgetpu}.tflite colors_labels.txt" in row
    r = cli("models", "list", "--format", "json")
    colors = next(m for m in json.loads(r.stdout)["models"] if m["name"] == "colors")
    assert [f["cached"] for f in colors["files"]] == [True, False, True]


def test_a_damaged_cached_file_is_downloaded_again(cli, env, server):
    assert cli("models", "pull", "colors").exit_code == 0
    (env["cache"] / "colors_labels.txt").write_text("tampered\n")
    r = cli("models", "pull", "colors")
    assert r.exit_code == 0, r.stderr
    assert "colors_labels.txt is not the published file" in r.stderr
    assert (env["cache"] / "colors_labels.txt").read_bytes() == env["files"]["colors_labels.txt"]


@pytest.mark.parametrize("mode, phrase", [("wrong", "SHA-256"), ("truncated", "bytes instead of")])
def test_a_file_that_does_not_verify_is_rejected_and_removed(cli, env, server, monkeypatch, mode, phrase):
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url(mode))
    r = cli("models", "pull", "colors")
    assert r.exit_code == ExitCode.VERIFY_FAILED
    line = one_error_line(r)
    assert "colors.tflite" in line and "not the published file" in line and phrase in line
    assert "removed" in line
    assert not (env["cache"] / "colors.tflite").exists()
    assert not (env["cache"] / "colors.tflite.part").exists()
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("ok"))  # the good file afterwards is fine
    assert cli("models", "pull", "colors").exit_code == 0


def test_git_id_verification_rejects_a_wrong_file(cli, env, server, monkeypatch):
    env["registry"].write_text(json.dumps(registry_doc(env["files"], env["models"], "git")))
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("wrong"))
    r = cli("models", "pull", "colors", "--cpu-only")
    assert r.exit_code == ExitCode.VERIFY_FAILED and "git object id" in one_error_line(r)
    assert not list(env["cache"].glob("colors*"))


@pytest.mark.parametrize("mode, attempts", [("404", 1), ("500", 3)])
def test_http_errors(cli, env, server, monkeypatch, mode, attempts):
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url(mode))
    r = cli("models", "pull", "colors")
    assert r.exit_code == ExitCode.DOWNLOAD_FAILED
    assert f"HTTP {mode}" in one_error_line(r)
    assert len(server.seen("colors.tflite")) == attempts  # 5xx are retried, 404 is not
    assert not env["cache"].joinpath("colors.tflite").exists()


def test_no_network(cli, env, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("EDGEAPP_MODELS_URL", f"http://127.0.0.1:{port}/{{path}}")
    r = cli("models", "pull", "colors")
    assert r.exit_code == ExitCode.DOWNLOAD_FAILED
    line = one_error_line(r)
    assert "connection refused" in line and "EDGEAPP_MODELS_URL" in line


def test_resume_after_a_cut_connection(cli, env, server, monkeypatch):
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("cut"))
    r = cli("models", "pull", "colors", "--cpu-only")
    assert r.exit_code == 0, r.stderr
    assert "cut after" in r.stderr and "resuming" in r.stderr
    size = len(env["files"]["colors.tflite"])
    first, second = server.seen("colors.tflite")
    assert first[1] is None and second[1] == f"bytes={size // 2}-"
    assert (env["cache"] / "colors.tflite").read_bytes() == env["files"]["colors.tflite"]


def test_cut_every_time_keeps_the_part_and_the_next_run_resumes(cli, env, server, monkeypatch,
                                                                color_images):
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("cutalways"))
    r = cli("models", "pull", "colors", "--cpu-only")
    assert r.exit_code == ExitCode.DOWNLOAD_FAILED
    assert "run the command again to resume" in one_error_line(r)
    part = env["cache"] / "colors.tflite.part"
    have = part.stat().st_size
    assert 0 < have < len(env["files"]["colors.tflite"])
    assert not (env["cache"] / "colors.tflite").exists()  # a partial file is never the model
    r = cli("classify", "colors", color_images["red"])  # never runs a partial model
    assert r.exit_code == ExitCode.DOWNLOAD_FAILED
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("ok"))
    server.requests.clear()
    have = part.stat().st_size
    assert cli("models", "pull", "colors", "--cpu-only").exit_code == 0
    assert server.seen("colors.tflite") == [("ok", f"bytes={have}-", False)]
    assert (env["cache"] / "colors.tflite").read_bytes() == env["files"]["colors.tflite"]


def test_a_server_without_ranges_restarts_from_zero(cli, env, server, monkeypatch):
    env["cache"].mkdir(parents=True)
    (env["cache"] / "colors.tflite.part").write_bytes(b"junk that is not the model")
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("norange"))
    r = cli("models", "pull", "colors", "--cpu-only")
    assert r.exit_code == 0, r.stderr
    assert server.seen("colors.tflite")[0][1] == "bytes=26-"  # asked, got the whole file
    assert (env["cache"] / "colors.tflite").read_bytes() == env["files"]["colors.tflite"]


def test_slow_server_completes_and_a_stalled_one_times_out(cli, env, server, monkeypatch):
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("slow"))
    assert cli("models", "pull", "colors", "--cpu-only").exit_code == 0
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("stall"))
    monkeypatch.setenv("EDGEAPP_MODELS_TIMEOUT", "0.3")
    r = cli("models", "pull", "toy_ssd")
    assert r.exit_code == ExitCode.DOWNLOAD_FAILED
    assert "toy_ssd.tflite" in one_error_line(r)
    assert len(server.seen("toy_ssd.tflite")) == 3


def test_full_disk_is_one_line(cli, env):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    env["cache"].mkdir(parents=True)
    (env["cache"] / "colors.tflite.part").symlink_to("/dev/full")  # every write: ENOSPC
    r = cli("models", "pull", "colors")
    assert r.exit_code == ExitCode.USAGE
    assert "disk full" in one_error_line(r)
    assert not (env["cache"] / "colors.tflite").exists()


def test_proxy_from_the_environment(cli, env, server, monkeypatch):
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("EDGEAPP_MODELS_URL", "http://models.invalid/ok/{path}")  # unresolvable
    r = cli("models", "pull", "colors", "--cpu-only")
    assert r.exit_code == 0, r.stderr
    assert server.seen("colors.tflite") == [("ok", None, True)]  # went through the proxy


def test_file_url_template_for_an_offline_copy(cli, env, tmp_path, monkeypatch):
    mirror = tmp_path / "mirror copy"
    for name, data in env["files"].items():
        (mirror / name).parent.mkdir(parents=True, exist_ok=True)
        (mirror / name).write_bytes(data)
    monkeypatch.setenv("EDGEAPP_MODELS_URL", mirror.as_uri() + "/{path}")
    assert cli("models", "pull", "colors").exit_code == 0
    (mirror / "toy_ssd.tflite").unlink()
    r = cli("models", "pull", "toy_ssd")
    assert r.exit_code == ExitCode.DOWNLOAD_FAILED and "not found" in one_error_line(r)


def test_bad_registry_and_template_are_usage_errors(cli, env, monkeypatch):
    doc = json.loads(env["registry"].read_text())
    doc["files"]["../escape.tflite"] = doc["files"].pop("colors.tflite")
    doc["models"]["colors"]["cpu"] = "../escape.tflite"
    env["registry"].write_text(json.dumps(doc))
    r = cli("models", "list")
    assert r.exit_code == ExitCode.USAGE and "without '..'" in one_error_line(r)
    env["registry"].write_text(json.dumps(registry_doc(env["files"], env["models"])))
    monkeypatch.setenv("EDGEAPP_MODELS_URL", "http://127.0.0.1:9/no-placeholder")
    r = cli("models", "pull", "colors")
    assert r.exit_code == ExitCode.USAGE and "{path}" in one_error_line(r)
    r = cli("models", "pull", "colours")
    assert r.exit_code == ExitCode.USAGE and "did you mean colors" in one_error_line(r)


def test_path(cli, env):
    r = cli("models", "path", "colors")
    assert r.exit_code == ExitCode.MODEL_INVALID
    assert "edgeapp models pull --cpu-only colors" in one_error_line(r)
    assert cli("models", "pull", "colors").exit_code == 0
    assert cli("models", "path", "colors").stdout.strip() == str(env["cache"] / "colors.tflite")
    assert cli("models", "path", "colors", "--edgetpu").stdout.strip() == \
        str(env["cache"] / "colors_edgetpu.tflite")
    doc = json.loads(cli("models", "path", "colors", "-f", "json").stdout)
    assert doc["files"]["sidecar"] == {"path": str(env["cache"] / "colors.json"), "cached": True}
    r = cli("models", "pull", "--cpu-only", "colors_pipeline2")
    assert r.exit_code == ExitCode.USAGE and "no CPU model" in one_error_line(r)
    assert cli("models", "pull", "colors_pipeline2").exit_code == 0
    assert cli("models", "path", "colors_pipeline2").stdout.split() == [
        str(env["cache"] / "pipeline" / f"colors_segment_{i}_of_2_edgetpu.tflite") for i in (0, 1)]


# --- model names as MODEL ----------------------------------------------------------------------

def classes(stdout: str) -> list:
    return [(Path(r["path"]).name, r["classes"][0]["label"]) for r in map(json.loads, stdout.splitlines())]


def test_classify_by_name_pulls_then_uses_the_cpu_model(cli, env, color_images):
    images = [color_images[c] for c in ("red", "green", "blue")]
    r = cli("classify", "colors", *images, "-f", "jsonl", "-k", "1")
    assert r.exit_code == 0, r.stderr
    assert "colors is not in the cache: pulling 2 file(s)" in r.stderr
    assert "no Edge TPU found: running colors.tflite" in r.stderr
    assert classes(r.stdout) == [("red.png", "red"), ("green.png", "green"), ("blue.png", "blue")]
    assert {json.loads(line)["device"] for line in r.stdout.splitlines()} == {"cpu"}
    assert not (env["cache"] / "colors_edgetpu.tflite").exists()  # no Edge TPU: not fetched
    again = cli("classify", "colors", *images, "-f", "jsonl", "-k", "1")
    assert "pulling" not in again.stderr and classes(again.stdout) == classes(r.stdout)


def test_twin_choice_follows_the_device(cli, env, color_images):
    red = color_images["red"]
    r = cli("classify", "colors", red, "--device", "cpu", "-k", "1")
    assert r.exit_code == 0 and "red" in r.stdout
    assert not (env["cache"] / "colors_edgetpu.tflite").exists()

    r = cli("classify", "colors", red, "--device", "usb", "--no-probe")  # the twin only
    assert r.exit_code == ExitCode.DEVICE_UNAVAILABLE, r.stderr
    assert (env["cache"] / "colors_edgetpu.tflite").exists()

    attach_usb_accelerator(env["tmp"] / "sysroot")  # one is attached, but it is not usable
    r = cli("classify", "colors", red, "-k", "1", "--no-probe", "-f", "jsonl")
    assert r.exit_code == 0, r.stderr
    assert "Edge TPU unavailable" in r.stderr and "running colors.tflite on CPU" in r.stderr
    assert classes(r.stdout) == [("red.png", "red")]


def test_detect_by_name_keeps_numbered_label_ids(cli, env, tmp_path):
    import numpy as np
    from PIL import Image

    a = np.zeros((64, 64, 3), np.uint8)
    a[0:16, 0:16, 2] = 255  # blue: class 2
    a[16:32, 32:48, 1] = 255  # green: class 1, a gap in the labels file
    Image.fromarray(a).save(tmp_path / "scene.png")
    r = cli("detect", "toy_ssd", tmp_path / "scene.png", "--format", "jsonl")
    assert r.exit_code == 0, r.stderr
    side = json.loads((env["cache"] / "toy_ssd.json").read_text())
    assert side["labels"] == ["red", "", "blue"] and side["task"] == "detect"
    objs = sorted((o["id"], o["label"], o["bbox"]) for o in json.loads(r.stdout)["objects"])
    assert objs == [(1, "", [32, 16, 48, 32]), (2, "blue", [0, 0, 16, 16])]


def test_other_commands_take_names(cli, env, color_images):
    r = cli("check", "colors", "--format", "json")
    assert r.exit_code in (0, ExitCode.NOT_MAPPABLE), r.stderr
    assert (env["cache"] / "colors.tflite").exists()
    r = cli("bench", "colors", "--runs", "2", "--warmup", "0", "--format", "json", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    r = cli("classify", "colors_pipeline2", color_images["red"])
    assert r.exit_code == ExitCode.USAGE and "pipelined" in one_error_line(r)
    r = cli("classify", "colours", color_images["red"])
    assert r.exit_code == ExitCode.MODEL_INVALID and "did you mean colors" in one_error_line(r)


# --- the package's registry --------------------------------------------------------------------

ISSUE_MODELS = [
    "mobilenet_v1", "mobilenet_v2", "efficientnet_s", "efficientnet_m", "efficientnet_l",
    "inception_v1", "inception_v2", "inception_v3", "inception_v4", "inat_bird", "inat_insect",
    "inat_plant", "ssd_mobilenet_v1_coco", "ssd_mobilenet_v2_coco", "ssd_mobilenet_v2_face",
    "efficientdet_lite0", "efficientdet_lite1", "efficientdet_lite2", "efficientdet_lite3",
    "efficientdet_lite3x", "movenet_lightning", "movenet_thunder", "posenet_481_641",
    "deeplabv3_pascal", "deeplabv3_dm05_pascal", "deeplab_slim_cityscapes",
    "ssd_mobilenet_v2_coco_pipeline4", "inception_v4_pipeline2"]


def test_shipped_registry():
    from edgeapp.core.registry import load_registry

    reg = load_registry()
    assert reg.source == "google-coral/test_data" and len(reg.commit) == 40
    assert set(ISSUE_MODELS) <= set(reg.models)
    for e in reg.models.values():
        if e.is_pipeline:
            assert e.cpu is None and all(s.path.startswith("pipeline/") for s in e.segments)
        else:
            assert e.edgetpu.path == e.cpu.path[: -len(".tflite")] + "_edgetpu.tflite"
        assert (e.labels is not None) == (e.task not in ("pose", "embed"))
    assert {e.task for e in reg.models.values()} == {"classify", "detect", "pose", "segment", "embed"}


def test_git_object_id_is_gits(tmp_path):
    from edgeapp.core.registry import digests, git_blob_sha1

    if not shutil.which("git"):
        pytest.skip("needs git")
    f = tmp_path / "x.bin"
    f.write_bytes(bytes(range(256)) * 3 + b"\0tail")
    out = subprocess.run(["git", "hash-object", str(f)], capture_output=True, text=True, check=True)
    assert git_blob_sha1(f.read_bytes()) == out.stdout.strip()
    assert digests(f) == (f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest(),
                          out.stdout.strip())


@pytest.mark.shared
def test_shipped_registry_matches_the_index():
    if not INDEX.is_file():
        pytest.skip(f"needs {INDEX}")
    from edgeapp.core.registry import load_registry

    index = json.loads(INDEX.read_text())
    known = {f["path"]: f for f in index["files"]}
    reg = load_registry()
    assert reg.commit == index["commit"]
    for e in reg.models.values():
        for _, ref in e.files():
            src = known[ref.path]
            assert (ref.git_blob_sha1, ref.size, ref.sha256) == (
                src["git_blob_sha1"], src.get("size"), src.get("sha256"))


@pytest.fixture()
def coral_env(server, tmp_path, monkeypatch):
    """The package's registry, Coral's real files served from ../shared/coral."""
    server.reset()
    server.root = SHARED
    for var in PROXY_VARS + ("EDGEAPP_MODELS_REGISTRY",):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEAPP_MODELS_URL", server.url("ok"))
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(tmp_path / "sysroot"))
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "absent" / "libedgetpu.so.1"))
    return tmp_path / "cache" / "models"


@pytest.mark.shared
def test_coral_mobilenet_v2_by_name(cli, coral_env):
    r = cli("classify", "mobilenet_v2", SHARED / "cat.bmp", "-f", "jsonl", "-k", "1")
    assert r.exit_code == 0, r.stderr
    top = json.loads(r.stdout)["classes"][0]
    assert (top["id"], top["label"]) == (286, "Egyptian cat")  # Coral's reference result
    side = json.loads((coral_env / "mobilenet_v2_1.0_224_quant.json").read_text())
    assert len(side["labels"]) == 1001 and side["labels"][0] == "background"


@pytest.mark.shared
def test_coral_twin_pair_by_sha256_and_fallback(cli, coral_env, tmp_path):
    attach_usb_accelerator(tmp_path / "sysroot")
    r = cli("classify", "mobilenet_v1_0.25_128", SHARED / "cat.bmp", "--no-probe", "-k", "1")
    assert r.exit_code == 0, r.stderr
    assert "running mobilenet_v1_0.25_128_quant.tflite on CPU" in r.stderr
    doc = json.loads(cli("models", "list", "-f", "json", "--task", "classify").stdout)
    m = next(m for m in doc["models"] if m["name"] == "mobilenet_v1_0.25_128")
    assert m["cached"] is True and {f["verified_by"] for f in m["files"]} == {"sha256"}


@pytest.mark.shared
def test_coral_ssd_labels_match_the_class_ids_the_model_emits(cli, coral_env):
    """Coral's SSD post-process has num_classes 90 and emits ids 0..89 without background;
    coco_labels.txt has 90 lines with "n/a" in the gaps, so line N is id N (pycoral: cat = 16)."""
    from flatbuffers import flexbuffers

    from edgeapp.core.labels import read_labels
    from edgeapp.core.tflite.model import load_model
    from edgeapp.core.vision.detect import POSTPROCESS_OP, OutputInfo, find_layout

    schema = tflite_schema()
    r = cli("models", "pull", "ssd_mobilenet_v2_coco_pipeline4", "-f", "json")
    assert r.exit_code == 0, r.stderr
    files = {f["role"]: Path(f["path"]) for f in json.loads(r.stdout)["models"][0]["files"]}
    last = load_model(files["segment3"])
    post = next(op for op in last.operators if op.op == POSTPROCESS_OP)
    outs = [OutputInfo(t.index, t.name, t.shape) for t in last.output_tensors]
    assert find_layout(outs, post.outputs).how == f"{POSTPROCESS_OP} op"
    assert find_layout(outs).how == "TF1 output order"
    m = schema.ModelT.InitFromPackedBuf(files["segment3"].read_bytes(), 0)
    op = m.subgraphs[0].operators[post.index]
    num_classes = flexbuffers.Loads(bytes(op.customOptions))["num_classes"]
    labels = read_labels(files["labels"])
    assert sorted(labels) == list(range(num_classes))
    assert (labels[0], labels[16], labels[11]) == ("person", "cat", "n/a")


@pytest.mark.shared
def test_coral_raw_models_get_their_pixels_unchanged(cli, coral_env):
    """Pose and segmentation models take raw pixels; the sidecar says so for quantized (DeepLab)
    and unquantized (MoveNet) uint8 inputs alike."""
    import numpy as np

    from edgeapp.core.tflite.model import load_model
    from edgeapp.core.vision.preprocess import quantize_input

    r = cli("models", "pull", "--cpu-only", "movenet_lightning", "deeplabv3_dm05_pascal", "-f", "json")
    assert r.exit_code == 0, r.stderr
    pixels = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    for m in json.loads(r.stdout)["models"]:
        model = load_model(next(f["path"] for f in m["files"] if f["role"] == "cpu"))
        t = model.input_tensors[0]
        scale, zero = t.quantization.per_tensor if t.quantization else (0.0, 0)
        pre = json.loads(Path(m["sidecar"]).read_text())["preprocessing"]
        out = quantize_input(pixels, np.dtype(t.dtype), scale, zero, pre["mean"], pre["std"])
        assert out.dtype == np.uint8 and (out == pixels).all(), m["name"]


def test_python_api_takes_names(env, color_images):
    import edgeapp

    model = edgeapp.open_model("colors", "cpu")
    assert model.device == "cpu" and model.classify(color_images["green"], top_k=1)[0]["label"] == "green"


def test_published_accuracy_is_listed_and_models_eval_measures_it_beside(cli, env, tmp_path):
    from media import write_color_folders

    doc = json.loads(env["registry"].read_text())
    doc["models"]["colors"]["published"] = {"top1": 0.975, "source": "https://example.test/colors"}
    env["registry"].write_text(json.dumps(doc))
    listed = cli("models", "list", "--format", "json")
    assert listed.exit_code == 0, listed.stderr
    by_name = {m["name"]: m for m in json.loads(listed.stdout)["models"]}
    assert by_name["colors"]["published"] == {"top1": 0.975, "source": "https://example.test/colors"}
    assert by_name["toy_ssd"]["published"] is None
    table = cli("models", "list")
    assert "top-1 97.5%" in next(line for line in table.stdout.splitlines() if line.startswith("colors "))
    data = write_color_folders(tmp_path / "data", 4, seed=3)
    r = cli("models", "eval", "colors", "--data", data, "--format", "json")
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["published"]["top1"] == 0.975
    assert got["models"][0]["images"] == 12 and got["models"][0]["metrics"]["top1"] > 0.9


def test_the_package_registry_says_where_each_published_number_is_from():
    reg = json.loads((ROOT / "edgeapp" / "core" / "coral_models.json").read_text())
    published = {n: m["published"] for n, m in reg["models"].items() if m.get("published")}
    assert published, "no published accuracy in the registry"
    for name, p in published.items():
        assert p["source"].startswith("https://coral.ai/models/"), name
        assert {k for k in p if k != "source"} <= {"top1", "top5", "map"}, name
