"""Image decoding and input quantization: pure functions, checked against hand computations."""

import io

import numpy as np
import pytest
from PIL import Image

from edgeapp.core.labels import parse_labels
from edgeapp.core.vision.classify import Class, dequantize, get_classes_from_scores, get_scores
from edgeapp.core.vision.preprocess import input_affine, load_image, load_input_tensor, quantize_input
from edgeapp.errors import InputError


def save(img: Image.Image, tmp_path, name: str, **kw):
    p = tmp_path / name
    img.save(p, **kw)
    return p


def test_modes_become_rgb(tmp_path):
    rgb = np.zeros((4, 4, 3), np.uint8)
    rgb[..., 0] = 200
    rgba = Image.fromarray(np.dstack([rgb, np.full((4, 4), 7, np.uint8)]), "RGBA")
    cases = {
        "rgba.png": rgba,
        "p.png": Image.fromarray(rgb).convert("P"),
        "l.png": Image.fromarray(rgb[..., 0], "L"),
        "cmyk.jpg": Image.fromarray(rgb).convert("CMYK"),
        "la.png": Image.fromarray(rgb[..., 0], "L").convert("LA"),
        "bw.png": Image.fromarray(rgb[..., 0] > 100).convert("1"),
    }
    for name, img in cases.items():
        out = load_image(save(img, tmp_path, name))
        assert out.mode == "RGB" and out.size == (4, 4), name
        a = np.asarray(out)
        assert a.dtype == np.uint8 and a.shape == (4, 4, 3)
    assert np.asarray(load_image(tmp_path / "rgba.png"))[0, 0].tolist() == [200, 0, 0]
    assert np.asarray(load_image(tmp_path / "l.png"))[0, 0].tolist() == [200, 200, 200]
    assert np.asarray(load_image(tmp_path / "l.png", channels=1)).shape == (4, 4)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_turns_the_image_as_pillow_does(tmp_path, orientation):
    """A photo taken sideways comes out as the camera meant it (EXIF Orientation 2..8), pixel
    for pixel as ImageOps.exif_transpose turns it; orientation 1 (upright) keeps the pixels."""
    from PIL import ImageOps

    pixels = np.arange(6 * 10 * 3, dtype=np.uint8).reshape(6, 10, 3) * 3
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = save(Image.fromarray(pixels), tmp_path, f"o{orientation}.png", exif=exif.tobytes())
    got = np.asarray(load_image(path))
    expected = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    assert got.shape == expected.shape == ((6, 10, 3) if orientation < 5 else (10, 6, 3))
    assert np.array_equal(got, expected)
    if orientation == 1:
        assert np.array_equal(got, pixels)


def test_16bit_png_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    p = tmp_path / "deep.png"
    Image.fromarray(values).save(p)  # a real 16-bit grayscale PNG
    assert Image.open(p).mode.startswith("I")
    got = np.asarray(load_image(p))[0, :, 0].tolist()
    assert got == [0, 1, 128, 255]


@pytest.mark.parametrize("content,match", [
    (b"", "not an image"),
    (b"hello, I am text", "not an image"),
])
def test_unreadable_files(tmp_path, content, match):
    p = tmp_path / "bad.jpg"
    p.write_bytes(content)
    with pytest.raises(InputError, match=match):
        load_image(p)


def test_truncated_jpeg(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    p = tmp_path / "cut.jpg"
    p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(InputError, match="cannot decode"):
        load_image(p)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_image(tmp_path / "nope.png")


def test_coral_skip_rule_passes_raw_pixels():
    px = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    out = quantize_input(px, np.uint8, 1 / 128, 128, 128.0, 128.0)  # MobileNet: scale 1/128, zp 128
    assert out is px


def test_general_rule_matches_coral_formula():
    px = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    scale, zp, mean, std = 1 / 255, 0, 128.0, 128.0
    out = quantize_input(px, np.uint8, scale, zp, mean, std)
    expected = np.clip(np.rint((px.astype(np.float64) - mean) / (std * scale) + zp), 0, 255)
    assert np.array_equal(out, expected.astype(np.uint8))


def test_model_metadata_normalization_is_identity_for_0_1_models():
    px = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    out = quantize_input(px, np.uint8, 1 / 255, 0, 0.0, 255.0)  # trained on pixel/255
    assert out is px


def test_int8_input():
    px = np.array([[[0], [128], [255]]], dtype=np.uint8)
    out = quantize_input(px, np.int8, 1 / 255, -128, 0.0, 255.0)
    assert out.dtype == np.int8 and out.reshape(-1).tolist() == [-128, 0, 127]
    other = quantize_input(px, np.int8, 2 / 255, 0, 0.0, 255.0)
    assert other.reshape(-1).tolist() == [0, 64, 127]  # 0, 63.75→64, 127.5→127 (clip 127.5→128→127)


def test_float_input():
    px = np.array([[[0], [255]]], dtype=np.uint8)
    out = quantize_input(px, np.float32, 0.0, 0, 127.5, 127.5)
    assert out.dtype == np.float32 and np.allclose(out.reshape(-1), [-1, 1])
    assert input_affine(np.float32, 0, 0, 0, 255) == (1 / 255, 0)


def test_prepare_image_resizes_to_model_input(tmp_path):
    p = save(Image.new("RGB", (64, 48), (10, 20, 30)), tmp_path, "x.png")
    t = load_input_tensor(p, (16, 8), 3, np.uint8, 1 / 255, 0, 0.0, 255.0)
    assert t.shape == (1, 8, 16, 3) and t[0, 0, 0].tolist() == [10, 20, 30]
    g = load_input_tensor(p, (16, 8), 1, np.uint8, 1 / 255, 0, 0.0, 255.0)
    assert g.shape == (1, 8, 16, 1)


def test_dequantize_and_scores():
    q = np.array([[0, 128, 255]], dtype=np.uint8)
    assert np.allclose(dequantize(q, 1 / 256, 0), [[0, 0.5, 255 / 256]])
    assert np.allclose(get_scores(np.array([[-128, 0, 127]], np.int8), 1 / 256, -128), [0, 0.5, 255 / 256])
    f = np.array([0.1, 0.9], np.float32)
    assert get_scores(f).tolist() == f.tolist()


def test_top_k_order_ties_and_threshold():
    s = np.array([0.1, 0.5, 0.2, 0.5, 0.05], np.float32)
    assert get_classes_from_scores(s, 3) == [Class(3, 0.5), Class(1, 0.5), Class(2, np.float32(0.2))]
    assert [c.id for c in get_classes_from_scores(s, 5, threshold=0.15)] == [3, 1, 2]
    assert get_classes_from_scores(s, 10)[-1].id == 4
    assert get_classes_from_scores(s, 0) == []


@pytest.mark.parametrize("text,expected", [
    ("0 cat\n1 dog\n", {0: "cat", 1: "dog"}),
    ("0:cat\n1:dog\n", {0: "cat", 1: "dog"}),
    ("3  tiger cat\n7 dog\n", {3: "tiger cat", 7: "dog"}),
    ("background\ntench, Tinca tinca\n\ngoldfish\n", {0: "background", 1: "tench, Tinca tinca", 3: "goldfish"}),
    ("\ufeffcat\ndog", {0: "cat", 1: "dog"}),
])
def test_label_formats(text, expected):
    assert parse_labels(text) == expected


def test_labels_numbered_mode_skips_lines_without_an_id_and_binary_is_refused(tmp_path):
    from edgeapp.core.labels import read_labels
    from edgeapp.errors import UsageError

    assert parse_labels("0 a\nfoo bar\n3: c\n") == {0: "a", 3: "c"}
    p = tmp_path / "labels.bin"
    p.write_bytes(bytes(range(256)))
    with pytest.raises(UsageError, match="not a text labels file"):
        read_labels(p)
