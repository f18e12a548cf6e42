"""Reading `edgeapp doctor`'s checks, and the environment its tests run it in."""

from __future__ import annotations

from pathlib import Path


def by_name(checks, name: str):
    found = [c for c in checks if c.name == name]
    assert found, f"no check {name!r} in {[c.name for c in checks]}"
    return found


def env_for(tmp_path: Path, **extra: str) -> dict:
    return {"USER": "alice", "PATH": str(tmp_path / "bin"), "EDGEAPP_CACHE_DIR": str(tmp_path / "cache"),
            "EDGEAPP_EDGETPU_LIB": str(tmp_path / "no" / "libedgetpu.so.1"), **extra}
