"""What `edgeapp eval` leaves and says around its metrics: predictions measured where they were
not made (a Coral Dev Board's Python has no COCO evaluator), Ctrl-C in a run of several models,
a wrong --images, models sharing a file name, the files' permissions, the per-class names."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys

import eval_sets
import pytest
from conftest import ROOT

from edgeapp.errors import ExitCode

pytest.importorskip("faster_coco_eval" if sys.version_info >= (3, 10) else "pycocotools")

V8 = ROOT / "tests" / "fixtures" / "yolo" / "yolov8_256_full_integer_quant.tflite"
SHAPES = ROOT / "models" / "shapes_yolov8_int8.tflite"  # its sidecar names the classes
# edgeapp run as a Python without a COCO evaluator (as the Dev Board's 3.7)
NO_EVALUATOR = ("import sys; sys.modules['pycocotools'] = sys.modules['faster_coco_eval'] = None; "
                "sys.argv = ['edgeapp'] + sys.argv[1:]; from edgeapp.cli.app import main; main()")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> dict:
    return eval_sets.shapes_set(tmp_path_factory.mktemp("shapes") / "set")


def _without_evaluator(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_EVALUATOR, "eval", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_predictions_saved_without_an_evaluator_are_measured_elsewhere(cli, shapes, tmp_path):
    """The board's path: predictions there (exit 0, saying how to go on), metrics here from
    the file, the same as measuring the model here."""
    board = _without_evaluator(V8, "--data", shapes["yaml"], "--save-predictions", tmp_path / "p")
    assert board.returncode == 0, board.stderr
    saved = tmp_path / "p" / "yolov8_256_full_integer_quant.json"
    assert json.loads(saved.read_text()), board.stderr
    assert "--predictions" in board.stderr and "Traceback" not in board.stderr
    later = cli("eval", "--predictions", saved, "--data", shapes["yaml"], "--format", "json")
    here = cli("eval", V8, "--data", shapes["yaml"], "--format", "json")
    assert later.exit_code == here.exit_code == 0, later.stderr + here.stderr
    measured = json.loads(later.stdout)["models"][0]
    assert measured["metrics"] == json.loads(here.stdout)["models"][0]["metrics"]
    assert measured["metrics"]["map50"] > 0.8 and measured["runs_on"] == "predictions file"


def test_predictions_of_other_data_are_exit_2(cli, shapes, tmp_path):
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"image_id": 999, "category_id": 0, "score": 0.9,
                                  "bbox": [1, 2, 3, 4]}]))
    r = cli("eval", "--predictions", wrong, "--data", shapes["yaml"])
    assert r.exit_code == ExitCode.USAGE and "image_id 999" in r.stderr, r.stderr
    both = cli("eval", V8, "--predictions", wrong, "--data", shapes["yaml"])
    assert both.exit_code == ExitCode.USAGE and "not both" in both.stderr


def test_without_an_evaluator_the_line_fits_the_python():
    """Below 3.9 the eval extra installs no evaluator: the line says what works there, never
    to install the extra the user has."""
    from edgeapp.core.eval.coco import missing

    for old in ((3, 7), (3, 8)):
        line = missing(old)
        assert "pip install" not in line and "--save-predictions" in line and "--predictions" in line
    assert "pip install 'edgeapp[eval]'" in missing((3, 11))


def test_an_exit_7_leaves_no_predictions_folder(shapes, tmp_path):
    """Metrics asked for (--plot) where none can be computed: exit 7 before anything is made."""
    r = _without_evaluator(V8, "--data", shapes["yaml"], "--save-predictions", tmp_path / "preds",
                           "--plot", tmp_path / "pr.png")
    assert r.returncode == ExitCode.MISSING_DEPENDENCY, r.stderr
    assert not (tmp_path / "preds").exists() and not (tmp_path / "pr.png").exists()


def test_ctrl_c_keeps_the_models_already_measured(shapes, tmp_path, capsys):
    """Ctrl-C while the second model runs: the first one's predictions are written and its
    row printed, and the line says what finished."""
    from edgeapp.cli.eval import run_eval
    from edgeapp.cli.options import Interrupted, ReportFormat
    from edgeapp.flows.open_task import Placement

    second = tmp_path / "second.tflite"
    shutil.copy(V8, second)

    @contextlib.contextmanager
    def progress(total: int, label: str):
        def advance() -> None:
            if "second" in label:
                raise KeyboardInterrupt
        yield advance

    with pytest.raises(Interrupted) as stopped:
        run_eval([str(V8), str(second)], Placement(), shapes["yaml"], None, None, None, None,
                 ReportFormat.table, tmp_path / "preds", None, None, progress=progress)
    assert "1 of 2 models finished (yolov8_256_full_integer_quant.tflite)" in str(stopped.value)
    assert json.loads((tmp_path / "preds" / "yolov8_256_full_integer_quant.json").read_text())
    assert not (tmp_path / "preds" / "second.json").exists()
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].startswith("yolov8_256_full_integer_quant.tflite") and len(rows) >= 2
    assert not any(r.startswith("second") for r in rows)


def test_a_wrong_images_folder_is_exit_2_saying_how_paths_are_joined(cli, shapes, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    r = cli("eval", V8, "--data", shapes["coco"], "--images", tmp_path / "elsewhere")
    assert r.exit_code == ExitCode.USAGE, r.stderr
    lines = r.stderr.strip().splitlines()
    assert "left out" not in r.stderr and "file_name" in lines[-1]
    assert str(tmp_path / "elsewhere" / "0000.png") in lines[-1]


def test_models_sharing_a_file_name_get_their_own_rows_and_files(cli, shapes, tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(V8, tmp_path / folder / "model.tflite")
    r = cli("eval", tmp_path / "a" / "model.tflite", tmp_path / "b" / "model.tflite",
            "--data", shapes["yaml"], "--save-predictions", tmp_path / "preds")
    assert r.exit_code == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()[1:3]]
    assert names == ["a/model.tflite", "b/model.tflite"]
    assert sorted(p.name for p in (tmp_path / "preds").iterdir()) == ["a_model.json", "b_model.json"]


def test_prediction_files_follow_the_umask(cli, shapes, tmp_path):
    old = os.umask(0o022)
    try:
        r = cli("eval", V8, "--data", shapes["yaml"], "--save-predictions", tmp_path)
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.stderr
    mode = (tmp_path / "yolov8_256_full_integer_quant.json").stat().st_mode & 0o777
    assert mode == 0o644


def test_the_per_class_line_names_classes_by_the_models_sidecar(cli, shapes, tmp_path):
    """YOLO labels without names (no classes.txt): the model's sidecar names the classes."""
    folder = tmp_path / "unnamed"
    shutil.copytree(shapes["images"], folder / "images")
    shutil.copytree(shapes["root"] / "labels" / "val", folder / "labels")
    r = cli("eval", SHAPES, "--data", folder)
    assert r.exit_code == 0, r.stderr
    per_class = next(line for line in r.stdout.splitlines() if "per class" in line)
    assert "circle" in per_class and "square" in per_class and "triangle" in per_class
