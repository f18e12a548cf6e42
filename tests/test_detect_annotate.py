"""detect --annotate: without OpenCV it is exit 7 (and doctor checks OpenCV); a folder run
twice does not read its own annotated images back, and -o makes its folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from edgeapp.errors import ExitCode


@pytest.fixture(scope="module")
def det_model(tmp_path_factory) -> Path:
    import detection_models as dm

    return dm.build(tmp_path_factory)["det_tf1"]


def without_opencv(*args) -> subprocess.CompletedProcess:
    """edgeapp in a Python where `import cv2` fails, as on a machine without OpenCV."""
    code = ("import sys\nsys.modules['cv2'] = None\nfrom edgeapp.cli.app import main\n"
            f"sys.argv = ['edgeapp'] + {[str(a) for a in args]!r}\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_detect_annotate_without_opencv_is_exit_7_and_doctor_checks_opencv(det_model, tmp_path, cli):
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    r = without_opencv("detect", det_model, tmp_path / "a.png", "--annotate", tmp_path / "ann")
    assert r.returncode == ExitCode.MISSING_DEPENDENCY, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("edgeapp: error: OpenCV is needed for --annotate")
    assert "pip install opencv-python" in r.stderr and "Traceback" not in r.stderr
    assert without_opencv("detect", det_model, tmp_path / "a.png").returncode == 0  # not needed

    checks = {c["name"]: c for c in json.loads(cli("doctor", "-f", "json").stdout)["checks"]}
    import cv2

    assert (checks["opencv"]["status"], checks["opencv"]["detail"].split()[0]) == ("ok", cv2.__version__)
    from edgeapp.flows.doctor.install import opencv_check

    missing = opencv_check("edgeapp_no_such_module")
    assert missing.status == "warn" and "pip install opencv-python" in missing.fix


def test_detect_does_not_read_its_own_annotated_images(det_model, tmp_path, cli):
    from PIL import Image

    a = np.zeros((64, 64, 3), np.uint8)
    a[16:32, 16:32, 0] = 255
    Image.fromarray(a).save(tmp_path / "one.png")
    for run in range(2):
        r = cli("detect", det_model, tmp_path, "--annotate", tmp_path / "ann", "-f", "jsonl",
                "-o", tmp_path / "new" / "dir" / "boxes.jsonl", "--overwrite")
        assert r.exit_code == 0, r.stderr
        records = [json.loads(ln) for ln in (tmp_path / "new/dir/boxes.jsonl").read_text().splitlines()]
        assert [Path(rec["path"]).name for rec in records] == ["one.png"]
        assert sorted(p.name for p in (tmp_path / "ann").iterdir()) == ["one.png"]
    assert "skipping 1 image(s) in the --annotate folder" in r.stderr
