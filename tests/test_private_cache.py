"""The suite's cache and Keras home are temporary folders: a command run by a test writes
its verdicts there and leaves the user's own cache alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from cli_run import edgeapp


def test_a_cli_run_leaves_the_users_cache_alone(tiny_model, color_images):
    from edgeapp.core.userdirs import cache_dir

    real = cache_dir({k: v for k, v in os.environ.items() if k != "EDGEAPP_CACHE_DIR"}) / "probe.json"
    ours = Path(os.environ["EDGEAPP_CACHE_DIR"])
    assert ours != real.parent and Path(os.environ["KERAS_HOME"]).parent == ours.parent

    def stamp():
        return real.stat().st_mtime_ns if real.exists() else None

    before = stamp()
    r = edgeapp("classify", tiny_model, color_images["red"])
    assert r.returncode == 0, r.stderr
    assert stamp() == before
    assert str(Path(tiny_model).resolve()) in (ours / "probe.json").read_text()
