"""`edgeapp classify` end to end on a model made by our own convert, with real images."""

import csv
import io
import json

import numpy as np
import pytest
from media import CLASSES, color_pixels
from PIL import Image

from edgeapp.errors import ExitCode


def jsonl(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_predictions_on_generated_images(cli, tiny_model, tiny_data):
    r = cli("classify", tiny_model, tiny_data / "test", "-f", "jsonl", "-k", "1")
    assert r.exit_code == 0, r.stderr
    records = jsonl(r.stdout)
    assert len(records) == 60
    right = sum(rec["classes"][0]["label"] == rec["path"].split("/")[-2] for rec in records)
    assert right >= 58, right


def test_jsonl_schema(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-k", "2")
    (rec,) = jsonl(r.stdout)
    assert set(rec) == {"path", "device", "model", "classes", "latency_ms", "error"}
    assert rec["device"] == "cpu" and rec["model"] == str(tiny_model) and rec["error"] is None
    assert rec["latency_ms"] > 0 and len(rec["classes"]) == 2
    assert set(rec["classes"][0]) == {"id", "label", "score"}
    assert rec["classes"][0] == {"id": CLASSES.index("red"), "label": "red", "score": rec["classes"][0]["score"]}
    assert rec["classes"][0]["score"] >= rec["classes"][1]["score"]


def test_csv_rows_and_header(cli, tiny_model, color_images, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    r = cli("classify", tiny_model, color_images["blue"], bad, "-f", "csv", "-k", "3")
    assert r.exit_code == ExitCode.INPUTS_FAILED
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["rank"] for row in rows[:3]] == ["1", "2", "3"]
    assert rows[0]["label"] == "blue" and rows[0]["path"] == str(color_images["blue"])
    assert rows[3]["path"] == str(bad) and rows[3]["error"] and rows[3]["rank"] == ""


def test_table_is_human_readable(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["green"], "-k", "1")
    assert r.stdout.strip().startswith(str(color_images["green"])) and " green 0." in r.stdout
    assert "1 image(s)" in r.stderr


def test_top_k_and_threshold(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-k", "3")
    assert len(jsonl(r.stdout)[0]["classes"]) == 3
    r = cli("classify", tiny_model, color_images["red"], "-f", "jsonl", "-k", "3", "--threshold", "0.5")
    (rec,) = jsonl(r.stdout)
    assert [c["label"] for c in rec["classes"]] == ["red"]


def test_labels_file_overrides_sidecar(cli, tiny_model, color_images, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("0 azul\n1 verde\n2 rojo\n")
    r = cli("classify", tiny_model, color_images["green"], "-f", "jsonl", "-k", "1", "--labels", labels)
    assert jsonl(r.stdout)[0]["classes"][0]["label"] == "verde"


def test_without_labels_reports_ids(cli, tiny_model, color_images, tmp_path):
    bare = tmp_path / "bare.tflite"
    bare.write_bytes(tiny_model.read_bytes())  # no sidecar beside it
    r = cli("classify", bare, color_images["red"], "-f", "jsonl", "-k", "1",
            "--mean", "0", "--std", "255")
    assert jsonl(r.stdout)[0]["classes"][0] == {"id": CLASSES.index("red"), "label": None,
                                               "score": pytest.approx(1.0, abs=0.05)}


def test_missing_labels_file(cli, tiny_model, color_images, tmp_path):
    r = cli("classify", tiny_model, color_images["red"], "--labels", tmp_path / "none.txt")
    assert r.exit_code == ExitCode.USAGE and "labels file not found" in r.stderr


def test_bad_images_are_records_and_the_batch_goes_on(cli, tiny_model, tmp_path):
    rng = np.random.default_rng(3)
    folder = tmp_path / "mixed"
    folder.mkdir()
    Image.fromarray(color_pixels(2, rng, 32)).save(folder / "a_good.png")
    (folder / "b_zero.jpg").write_bytes(b"")
    buf = io.BytesIO()
    Image.fromarray(color_pixels(0, rng, 64)).save(buf, "JPEG")
    (folder / "c_truncated.jpg").write_bytes(buf.getvalue()[:300])
    (folder / "d_text.png").write_text("not an image")
    (folder / "notes.txt").write_text("skipped: not an image suffix")
    Image.fromarray(color_pixels(1, rng, 32)).convert("CMYK").save(folder / "e_cmyk.jpg")
    Image.fromarray(color_pixels(0, rng, 32)).convert("P").save(folder / "f_palette.png")
    r = cli("classify", tiny_model, folder, "-f", "jsonl", "-k", "1")
    assert r.exit_code == ExitCode.INPUTS_FAILED
    recs = {rec["path"].split("/")[-1]: rec for rec in jsonl(r.stdout)}
    assert sorted(recs) == ["a_good.png", "b_zero.jpg", "c_truncated.jpg", "d_text.png",
                            "e_cmyk.jpg", "f_palette.png"]
    assert recs["a_good.png"]["classes"][0]["label"] == "red"
    assert recs["e_cmyk.jpg"]["classes"][0]["label"] == "green"
    assert recs["f_palette.png"]["classes"][0]["label"] == "blue"
    for bad in ("b_zero.jpg", "c_truncated.jpg", "d_text.png"):
        assert recs[bad]["error"] and recs[bad]["classes"] == [] and "\n" not in recs[bad]["error"]
    assert "3 failed" in r.stderr


def test_paths_from_stdin_and_globs(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, "-", "-f", "jsonl", input=f"{color_images['red']}\n{color_images['blue']}\n")
    assert [rec["classes"][0]["label"] for rec in jsonl(r.stdout)] == ["red", "blue"]
    folder = color_images["red"].parent
    r = cli("classify", tiny_model, str(folder / "g*.png"), "-f", "jsonl")
    assert [rec["classes"][0]["label"] for rec in jsonl(r.stdout)] == ["green"]
    r = cli("classify", tiny_model, str(folder / "zzz*.png"))
    assert r.exit_code == ExitCode.USAGE and "no files match" in r.stderr


def test_wrong_model_kind(cli, color_images, tmp_path):
    r = cli("classify", tmp_path / "x.tflite", color_images["red"])
    assert r.exit_code == ExitCode.MODEL_INVALID


def test_resume_requires_output(cli, tiny_model, color_images):
    r = cli("classify", tiny_model, color_images["red"], "--resume")
    assert r.exit_code == ExitCode.USAGE and "--output" in r.stderr


def test_workers_zero_gives_the_same_results(cli, tiny_model, tiny_data):
    a = cli("classify", tiny_model, tiny_data / "test", "-f", "jsonl", "--workers", "0")
    b = cli("classify", tiny_model, tiny_data / "test", "-f", "jsonl", "--workers", "3")

    def strip(out):
        return [(r["path"], r["classes"]) for r in jsonl(out)]

    assert strip(a.stdout) == strip(b.stdout)


def test_labels_embedded_in_model_metadata_zip(cli, tiny_model, color_images, tmp_path):
    """Models with TFLite metadata carry their labels in a zip appended to the flatbuffer."""
    import zipfile

    model = tmp_path / "with_metadata.tflite"
    model.write_bytes(tiny_model.read_bytes())
    with zipfile.ZipFile(model, "a") as z:
        z.writestr("labels.txt", "cyan\nmagenta\nyellow\n")
    r = cli("classify", model, color_images["red"], "-f", "jsonl", "-k", "1", "--mean", "0", "--std", "255")
    assert r.exit_code == 0, r.stderr
    assert jsonl(r.stdout)[0]["classes"][0]["label"] == "yellow"


def test_nothing_to_classify_is_a_usage_error(cli, tiny_model, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("no images here")
    r = cli("classify", tiny_model, tmp_path / "empty")
    assert r.exit_code == ExitCode.USAGE and "no images found" in r.stderr, r.stderr
    r = cli("classify", tiny_model, "-", input="")
    assert r.exit_code == ExitCode.USAGE, r.stderr
    assert "error: no image paths on stdin (-): give one path per line" in r.stderr, r.stderr


def test_a_missing_input_path_is_named_on_stderr(cli, tiny_model, color_images, tmp_path):
    """A typo'd folder is said where the user looks, not only in the results file; with no
    valid input at all it is a usage error (exit 2), as a glob that matches nothing is."""
    typo = tmp_path / "typo_dir"
    out = tmp_path / "typo.csv"
    r = cli("classify", tiny_model, typo, "--output", out)
    assert r.exit_code == ExitCode.USAGE, r.stderr
    assert f"error: no such file or folder: {typo}" in r.stderr, r.stderr
    assert not out.exists()

    r = cli("classify", tiny_model, typo, color_images["red"], "--output", out)
    assert r.exit_code == ExitCode.INPUTS_FAILED, r.stderr
    assert f"warning: {typo}: no such file or folder" in r.stderr, r.stderr
    assert "1 failed" in r.stderr and f"{typo}," in out.read_text()


def test_a_fifo_is_an_error_record_not_a_hang(cli, tiny_model, color_images, tmp_path):
    import os

    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    r = cli("classify", tiny_model, fifo, color_images["red"], "-f", "jsonl", "-k", "1")
    assert r.exit_code == ExitCode.INPUTS_FAILED
    recs = jsonl(r.stdout)
    assert recs[0]["error"].endswith("not a regular file") and recs[1]["classes"][0]["label"] == "red"


def test_two_input_model_is_refused(cli, tiny_model, tmp_path, color_images):
    from tflite_edit import edited_model

    def two_inputs(m):
        sg = m.subgraphs[0]
        sg.inputs = [sg.inputs[0], sg.outputs[0]]

    p = edited_model(tiny_model, tmp_path, "two.tflite", two_inputs)
    r = cli("classify", p, color_images["red"])
    assert r.exit_code == ExitCode.MODEL_INVALID and "2 inputs" in r.stderr


@pytest.mark.parametrize("args", [["-t", "nan"], ["--mean", "inf"], ["--threads", "100000"], ["--threads", "0"]])
def test_absurd_numbers_are_usage_errors(cli, tiny_model, color_images, args):
    r = cli("classify", tiny_model, color_images["red"], *args)
    assert r.exit_code == ExitCode.USAGE, r.stderr
