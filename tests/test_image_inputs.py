"""Images that cannot be run, each an error record and not a crash: past the pixel limit
(EDGEAPP_MAX_PIXELS decides, also past Pillow's own), NaN in a float image.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
from cli_run import edgeapp

from edgeapp.errors import ExitCode


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A 1-bit PNG that declares width×height and holds no pixel data (its IDAT is not even a
    zlib stream): Pillow reads the size without decoding, and fails at once when asked to
    decode, before touching the pixels it set aside."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"no pixels here")
                     + chunk(b"IEND", b""))
    return path


def test_the_pixel_limit_is_edgeapps_also_past_pillows(tiny_model, tmp_path):
    big = png_header_only(tmp_path / "big.png", 20000, 10000)  # 200 MP: past Pillow's 179 MP error
    r = edgeapp("classify", tiny_model, big, "-f", "jsonl", env={"EDGEAPP_MAX_PIXELS": "150000000"})
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    error = json.loads(r.stdout)["error"]
    assert "over the 150-megapixel limit; set EDGEAPP_MAX_PIXELS" in error
    assert "decompression bomb" not in error.lower() and "exceeds limit" not in error

    r = edgeapp("classify", tiny_model, big, "-f", "jsonl", env={"EDGEAPP_MAX_PIXELS": "500000000"})
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    error = json.loads(r.stdout)["error"]  # allowed: decoding starts, and finds no pixels
    assert "cannot decode image" in error and "megapixel" not in error
    assert "decompression bomb" not in error.lower() and "exceeds limit" not in error


def test_a_float_image_with_nan_is_an_error_record_without_numpys_warning(tiny_model, color_images, tmp_path):
    from PIL import Image

    a = np.full((16, 16), 0.5, np.float32)
    a[3, 4] = np.nan
    Image.fromarray(a, "F").save(tmp_path / "nan.tiff")
    r = edgeapp("classify", tiny_model, tmp_path / "nan.tiff", color_images["red"], "-f", "jsonl")
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    records = {Path(rec["path"]).name: rec for rec in map(json.loads, r.stdout.splitlines())}
    assert "1 NaN or infinite pixel value(s)" in records["nan.tiff"]["error"]
    assert records["nan.tiff"]["classes"] == [] and records["red.png"]["error"] is None
    assert "RuntimeWarning" not in r.stderr and "invalid value" not in r.stderr
