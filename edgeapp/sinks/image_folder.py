"""Image folders the inference commands write into (--annotate, a task's own such as segment's
--mask): one file per input, names kept unique, never read back as inputs."""

import os
from pathlib import Path
from typing import Callable, List, Optional, Set

from edgeapp.errors import UsageError


class ImageFolder:
    """Writes one image per input path into `folder`, keeping names unique (cat.png, cat_1.png)."""

    _KEEP = {".jpg", ".jpeg", ".png", ".bmp"}

    def __init__(self, folder: Path, option: str = "--annotate") -> None:
        from edgeapp.hw.capture import cv2_module

        cv2_module(needed_for=option)  # before any image: exit 7 with the install line
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"{option} {folder}: cannot create it ({e.strerror or e})") from None
        self.folder, self.option = folder, option
        self.used: Set[str] = set()

    def exclude_own(self, paths: List[str], on_notice: Callable[[str], None] = lambda _t: None) -> List[str]:
        """Inputs minus the images inside this folder: `detect . --annotate ann/` run twice must
        not process its own drawings."""
        own = os.path.realpath(self.folder) + os.sep
        kept = [p for p in paths if not os.path.realpath(p).startswith(own)]
        if len(kept) < len(paths):
            on_notice(f"skipping {len(paths) - len(kept)} image(s) in the {self.option} folder "
                      f"{self.folder}")
        if not kept:
            raise UsageError(f"no images left: every input is in the {self.option} folder {self.folder}")
        return kept

    def _target(self, path: str, ext: Optional[str]) -> Path:
        p = Path(path)
        if ext is None:
            ext = p.suffix.lower() if p.suffix.lower() in self._KEEP else ".png"
        name, n = p.stem + ext, 1
        while name in self.used:
            name, n = f"{p.stem}_{n}{ext}", n + 1
        self.used.add(name)
        return self.folder / name

    def write(self, path: str, array, ext: Optional[str] = None) -> Path:
        """Write a BGR (or single-channel, 8/16-bit) array for input `path`; returns the file."""
        from edgeapp.hw.capture import cv2_module

        cv2 = cv2_module()

        out = self._target(path, ext)
        if not cv2.imwrite(os.fspath(out), array):
            raise UsageError(f"{self.option}: cannot write {out}")
        return out

    def annotate(self, path: str, image, draw: Callable) -> Path:
        """A copy of the decoded Pillow `image` with `draw(bgr)` applied, for input `path`."""
        import numpy as np

        rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])
        draw(bgr)
        return self.write(path, bgr)
