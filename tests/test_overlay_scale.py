"""`--annotate` labels grow with the image: a 1280x720 photo gets text twice as tall as a
640x360 one (a fixed font scale made it tiny on HD frames), and small images stay legible."""

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("cv2", reason="pip install 'edgeapp[camera]' (OpenCV draws the overlays)")


def _red(path, size):
    a = np.zeros((size[1], size[0], 3), np.uint8)
    a[:, :, 0] = 220
    Image.fromarray(a).save(path)
    return path


def _label_height(path) -> int:
    """Rows of the classify label's black box, read down its left edge (x = 4)."""
    a = np.asarray(Image.open(path).convert("RGB")).astype(int)
    column = a[: a.shape[0] // 4, 4]
    return int(np.sum(column.sum(axis=1) < 60))


def test_the_label_scales_with_the_image(cli, tiny_model, tmp_path):
    sizes = {"sd": (640, 360), "hd": (1280, 720), "tiny": (160, 120)}
    images = [_red(tmp_path / f"{name}.png", size) for name, size in sizes.items()]
    out = tmp_path / "annotated"
    r = cli("classify", tiny_model, *images, "--annotate", out)
    assert r.exit_code == 0, r.stderr
    sd, hd, tiny = (_label_height(out / f"{name}.png") for name in sizes)
    assert hd >= 0.025 * 720, hd  # legible on an HD frame: at least 2.5% of its height
    assert 1.6 <= hd / sd <= 2.4, (sd, hd)  # proportional to the image
    assert tiny >= 10, tiny  # never below a legible size


def test_text_scale_is_proportional_with_a_floor():
    from edgeapp.core.vision.overlay import text_scale

    assert text_scale((720, 1280, 3)) == pytest.approx(2 * text_scale((360, 640, 3)))
    assert text_scale((1280, 720)) == text_scale((720, 1280))  # the shorter side decides
    assert text_scale((60, 80)) == 0.4
