"""Cascades: a detector, then a second model on the crop of each box (`--then TASK:MODEL`,
`--on LABEL`): a bird found, then its species named.

The crop is cut from the image the detector already decoded (no second decode) and goes into
the second model with that model's own preprocessing, as `classify` would prepare a photo of
just that box; its result is added to the box under the second task's field, in the form that
task writes (`classes` for classify: [{"id", "label", "score"}]). On a camera with --track, a
track's crop is run again only every `every` frames or when its box has grown by half, so a
bird sitting still costs one classification, not one per frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Optional, Tuple, Union

import numpy as np

from edgeapp.errors import UsageError
from edgeapp.tasks import names

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from edgeapp.tasks.base import Prepared, Result

GROWTH = 1.5  # a track's box this many times larger than when last run: run it again


def parse_then(text: str, first: str) -> Tuple[str, str]:
    """(task, model) of `TASK:MODEL` (`classify:birds.tflite`) following a model of the task
    `first`, which the second cannot be; UsageError names the tasks it can be."""
    task, sep, model = str(text).partition(":")
    choices = [n for n in names() if n != first]
    if not sep or not model or task not in choices:
        raise UsageError(f"--then {text!r}: write TASK:MODEL, TASK one of {', '.join(choices)} "
                         "(e.g. classify:birds.tflite)")
    return task, model


def parse_on(text: Optional[str], labels: Optional[Dict[int, str]] = None) -> FrozenSet[str]:
    """The labels whose boxes go to the second model (`bird` or `bird,cat`); empty: every box.
    With the detector's `labels` known, a label it cannot give is a UsageError naming those it
    can: the cascade would otherwise run on nothing, silently."""
    on = frozenset(p.strip() for p in str(text or "").split(",") if p.strip())
    known = set((labels or {}).values())
    unknown = sorted(on - known) if known else []
    if unknown:
        shown = sorted(known)
        more = f" and {len(shown) - 20} more" if len(shown) > 20 else ""
        raise UsageError(f"--on {', '.join(unknown)}: the detector has no such label (its labels: "
                         f"{', '.join(shown[:20])}{more})")
    return on


@dataclass
class Cascade:
    """The second model of a cascade, opened (flows/open_task.OpenTask), the labels it takes and
    how often a track's crop is run again."""

    opened: Any  # flows.open_task.OpenTask of the second model
    on: FrozenSet[str] = frozenset()
    every: int = 15  # frames between two runs of one track's crop (detect's then_every)
    runs: int = 0  # crops the second model ran on (for summaries and tests)
    _tracks: Dict[Any, Tuple[int, float, Any]] = field(default_factory=dict)  # id -> (frame, area, value)

    @property
    def field(self) -> str:
        return self.opened.task.kind.field

    def apply(self, fields: dict, image: Union[PILImage, np.ndarray], frame: Optional[int] = None) -> None:
        """Add the second model's result to each box of `fields` with a chosen label, in place.
        `image`: the decoded photo (Pillow) or the camera frame (BGR array) the boxes are in."""
        task = self.opened.task.on(self.opened.engine)
        alive = set()
        for obj in fields.get("objects", ()):
            if self.on and obj.get("label") not in self.on:
                continue
            x0, y0, x1, y1 = (int(round(v)) for v in obj["bbox"])
            area = float(max(0, x1 - x0) * max(0, y1 - y0))
            track = obj.get("track_id")
            if track is not None and frame is not None:
                alive.add(track)
                seen = self._tracks.get(track)
                if seen is not None and frame - seen[0] < self.every and area <= GROWTH * seen[1]:
                    obj[self.field] = seen[2]
                    continue
            crop = _crop(image, (x0, y0, x1, y1))
            if crop is None:
                continue
            result = task.run_frame(crop)[0] if isinstance(image, np.ndarray) else task.run(crop)
            value = result.fields[self.field]
            obj[self.field] = value
            self.runs += 1
            if track is not None and frame is not None:
                self._tracks[track] = (frame, area, value)
        if frame is not None:  # tracks that ended take nothing with them
            for gone in set(self._tracks) - alive:
                del self._tracks[gone]

    def hook(self, then: Optional[Callable] = None) -> Callable:
        """A batch's per-image hook (flows/batch on_result) running the cascade first, then `then`
        (--annotate, which draws the crops' results too)."""

        def run(path: str, prepared: Prepared, result: Result) -> Optional[dict]:
            self.apply(result.fields, prepared.image)
            return then(path, prepared, result) if then is not None else None

        return run

    def close(self) -> None:
        self.opened.close()


def _crop(image: Union[PILImage, np.ndarray], box: Tuple[int, int, int, int]) -> Any:
    """The box's pixels of a Pillow image or an array, clipped to it; None when empty."""
    x0, y0, x1, y1 = box
    if isinstance(image, np.ndarray):
        h, w = image.shape[:2]
        x0, x1, y0, y1 = max(0, x0), min(w, x1), max(0, y0), min(h, y1)
        return np.ascontiguousarray(image[y0:y1, x0:x1]) if x1 > x0 and y1 > y0 else None
    w, h = image.size
    x0, x1, y0, y1 = max(0, x0), min(w, x1), max(0, y0), min(h, y1)
    return image.crop((x0, y0, x1, y1)) if x1 > x0 and y1 > y0 else None
