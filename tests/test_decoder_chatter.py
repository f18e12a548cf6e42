"""Broken TIFFs are a one-line record error each, and nothing else reaches the terminal: neither
Pillow's log record (`More samples per pixel than can be decoded: 13827`) nor libtiff's own
native messages (`ZIPDecode: Decoding error ...`), which it prints to file descriptor 2 (so the
command runs in a real process here, not in Typer's runner)."""

import json
import struct
import subprocess
import sys

import numpy as np
from conftest import ROOT
from PIL import Image

from edgeapp.errors import ExitCode


def _too_many_samples(path):
    """A valid TIFF whose SamplesPerPixel says 13827 (the issue's file)."""
    Image.new("RGB", (8, 8), (200, 10, 10)).save(path)
    data = bytearray(path.read_bytes())
    ifd = struct.unpack_from("<I", data, 4)[0]
    for i in range(struct.unpack_from("<H", data, ifd)[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, entry)[0] == 277:  # SamplesPerPixel, SHORT
            struct.pack_into("<H", data, entry + 8, 13827)
    path.write_bytes(bytes(data))
    return path


def _corrupt_strip(path, compression):
    """A TIFF compressed by libtiff whose strip data is damaged after its first bytes."""
    rng = np.random.default_rng(4)
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(path, compression=compression)
    with Image.open(path) as img:
        start = img.tag_v2[273][0]  # StripOffsets
    data = bytearray(path.read_bytes())
    for i in range(start + 4, min(start + 400, len(data)), 7):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


def test_broken_tiffs_are_one_line_each_and_nothing_else(tiny_model, tmp_path):
    files = [_too_many_samples(tmp_path / "samples.tif"),
             _corrupt_strip(tmp_path / "zip.tif", "tiff_deflate"),
             _corrupt_strip(tmp_path / "lzw.tif", "tiff_lzw")]
    r = subprocess.run([sys.executable, "-m", "edgeapp", "classify", str(tiny_model), *map(str, files),
                        "-f", "jsonl", "--workers", "2"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == ExitCode.INPUTS_FAILED, r.stderr
    strays = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("edgeapp: ")]
    assert not strays, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    assert [rec["path"] for rec in records] == [str(f) for f in files]
    for rec, f in zip(records, files):
        assert rec["error"].startswith(f"{f}: ") and "\n" not in rec["error"], rec
