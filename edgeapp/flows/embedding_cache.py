"""Embeddings already computed, kept in the user's cache folder, so retraining after adding ten
photos costs ten extractions.

An embedding is filed under the SHA-256 of the model file that computed it and the SHA-256 of
the image file's bytes: renaming or moving photos keeps their entries; another model (even the
compiled twin of the same one, whose numbers differ slightly) has its own. One small .npy file
per image: safe to write from several runs at once (written aside, then renamed), and a
damaged entry is only a miss.
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from edgeapp.core.registry import file_sha256
from edgeapp.core.userdirs import cache_dir


def content_keys(paths: Sequence[str], workers: int = 2) -> list[Optional[str]]:
    """The SHA-256 of each file (None when it cannot be read: the pipeline then reports why),
    on a few threads (hashlib releases the GIL)."""
    def key(path: str) -> Optional[str]:
        try:
            return file_sha256(path)
        except OSError:
            return None

    if workers <= 1 or len(paths) < 2:
        return [key(p) for p in paths]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgeapp-hash") as pool:
        return list(pool.map(key, paths))


class EmbeddingCache:
    """get/put one embedding by (model key, image key); `root` defaults to the user cache."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.root = Path(root) if root is not None else cache_dir() / "embeddings"
        self.broken: Optional[str] = None  # why writing stopped (read-only cache), said once

    def _file(self, model_key: str, image_key: str) -> Path:
        return self.root / model_key / image_key[:2] / f"{image_key}.npy"

    def get(self, model_key: str, image_key: str) -> Optional[np.ndarray]:
        try:
            value = np.load(self._file(model_key, image_key), allow_pickle=False)
        except (OSError, ValueError):
            return None
        return value if value.ndim == 1 else None

    def put(self, model_key: str, image_key: str, vector: np.ndarray) -> None:
        if self.broken:
            return
        target = self._file(model_key, image_key)
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=str(target.parent), suffix=".part")
            with os.fdopen(fd, "wb") as f:
                np.save(f, np.asarray(vector, dtype=np.float32).ravel(), allow_pickle=False)
            os.replace(tmp, target)
        except OSError as e:
            self.broken = f"cannot write the embedding cache {self.root}: {e.strerror or e}"
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
