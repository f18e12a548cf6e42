"""Labelled data as `eval` and the tasks' scorers read it: images and their truth (pure data;
flows/eval_data.py and flows/eval_coco.py read it from the formats users have)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Hashable, Iterable, List, Optional

from typing_extensions import TypedDict

from edgeapp.errors import UsageError

if TYPE_CHECKING:
    from edgeapp.core.eval.schema import CocoTruth

KINDS = ("classification", "detection", "segmentation", "keypoints")


class DataSummary(TypedDict):
    """What eval's JSON says of the labelled data."""
    path: str
    format: str
    task_data: str  # one of KINDS
    images: int
    classes: List[str]


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
    coco: Optional[CocoTruth] = None
    notes: List[str] = field(default_factory=list)
    named: bool = True  # False: the data has no class names, classes match the model's by index
    category_ids: Dict[Any, Any] = field(default_factory=dict)  # class key -> the data's own id
    class_at: Dict[Any, str] = field(default_factory=dict)  # class key -> where it is first used

    def own_category(self, key: Hashable) -> Hashable:
        """A class key as the data itself names it (a COCO category id), for saved predictions."""
        return self.category_ids.get(key, key)

    def class_key(self, own: Hashable) -> Optional[Hashable]:
        """The class key of a category as the data names it (a saved prediction's category_id);
        None when the data has no such category."""
        if self.category_ids:
            return next((k for k, v in self.category_ids.items() if v == own and type(v) is type(own)),
                        None)
        return own if own in self.names else None

    def check_model_classes(self, labels: Optional[Dict[int, str]]) -> None:
        """Data without class names numbers its classes as the model does: a class id at or
        beyond the model's class count is exit 2, naming where it is used."""
        if self.named or not labels:
            return
        count = max(int(k) for k in labels) + 1
        beyond = sorted(k for k in self.names if int(k) >= count)
        if beyond:
            raise UsageError(f"{self.class_at.get(beyond[0], self.source)}: class {beyond[0]} is out "
                             f"of range (the model has {count} classes: 0..{count - 1})")

    def truth_share(self, keys: Iterable[Hashable]) -> float:
        """The share of the ground truth (objects, or images) whose class is among `keys`."""
        keys = set(keys)
        if self.coco is not None:
            anns = self.coco["annotations"]
            return sum(1 for a in anns if a["category_id"] in keys) / len(anns) if anns else 0.0
        return sum(1 for t in self.truth if t in keys) / len(self.truth) if self.truth else 0.0

    def describe(self) -> str:
        """One line: what was found, and how much."""
        what = f"{len(self.paths)} image(s)"
        if self.coco is not None:
            what += f", {len(self.coco['annotations'])} " + (
                "person(s)" if self.kind == "keypoints" else "object(s)")
        return f"{self.format} {self.source}: {what}, {len(self.names)} class(es)"

    def summary(self) -> DataSummary:
        """What `--format json` says of the data."""
        return {"path": str(self.source), "format": self.format, "task_data": self.kind,
                "images": len(self.paths), "classes": [self.names[k] for k in self.names]}
