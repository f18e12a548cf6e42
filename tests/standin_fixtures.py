"""Fixtures of the stand-in Edge TPU (tests/standin.py): the library, built once, and `tpus`,
which makes this process see the stand-in devices a test asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest
from standin import ENV_KEYS, build_standin, standin_env


@pytest.fixture(scope="session")
def standin_lib(tmp_path_factory) -> Path:
    try:
        return build_standin(tmp_path_factory.mktemp("standin"))
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.fixture()
def tpus(standin_lib, monkeypatch, tmp_path):
    """tpus("usb,usb,pci", delay_ms=..., fail=..., unplug=..., ...): this process sees those
    stand-in TPUs (standin_env's keywords)."""
    monkeypatch.setenv("EDGEAPP_CACHE_DIR", str(tmp_path / "cache"))
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)

    def configure(devices: str = "usb,usb", delay_ms: float = 0.0, fail: Optional[str] = None,
                  **more) -> dict:
        env = standin_env(standin_lib, devices, delay_ms, fail, **more)
        for key in ENV_KEYS:
            if key not in env and key != "FAKE_EDGETPU_LOG":
                monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return env

    return configure
