"""Labelled data as `eval` and the tasks' scorers read it: images and their truth (pure data;
flows/eval_data.py and flows/eval_coco.py read it from the formats users have)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

KINDS = ("classification", "detection", "segmentation", "keypoints")


@dataclass
class EvalData:
    """Images and their truth. `names`: the data's classes {key: name} (a COCO category id, a
    YOLO class index, a class folder's index, a mask value). `truth`: per image, its class key
    (classification) or its mask file (segmentation); `coco`: the ground truth as a COCO dict
    whose image ids are positions in `paths` (detection, keypoints). `ids`: the data's own id of
    each image, for saved predictions."""

    kind: str  # one of KINDS
    format: str  # what was found, in words
    source: Path
    paths: List[str]
    ids: List[Any]
    names: Dict[Any, str]
    truth: List[Any] = field(default_factory=list)
    coco: Optional[dict] = None
    notes: List[str] = field(default_factory=list)
    named: bool = True  # False: the data has no class names, classes match the model's by index

    def describe(self) -> str:
        """One line: what was found, and how much."""
        what = f"{len(self.paths)} image(s)"
        if self.coco is not None:
            what += f", {len(self.coco['annotations'])} " + (
                "person(s)" if self.kind == "keypoints" else "object(s)")
        return f"{self.format} {self.source}: {what}, {len(self.names)} class(es)"

    def summary(self) -> dict:
        """What `--format json` says of the data."""
        return {"path": str(self.source), "format": self.format, "task_data": self.kind,
                "images": len(self.paths), "classes": [self.names[k] for k in self.names]}
