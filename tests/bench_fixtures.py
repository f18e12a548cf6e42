"""Fixtures of `edgeapp bench`'s tests: a machine with no power sensor, no Edge TPU and no
compiler."""

import pytest


@pytest.fixture()
def bench_env(tmp_path, monkeypatch):
    """No power sensors (empty sysfs root), no Edge TPU library, a private peak cache."""
    monkeypatch.setenv("EDGEAPP_SYSROOT", str(tmp_path / "sysfs"))
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEAPP_EDGETPU_LIB", str(tmp_path / "no-libedgetpu.so.1"))
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))  # no vcgencmd, no edgetpu_compiler
    monkeypatch.delenv("EDGETPU_COMPILER", raising=False)
    return tmp_path
