"""Segment images: the class of every pixel, on the Edge TPU or the CPU.

MODEL: a DeepLab-style model (class scores [1, H, W, C] or a class map [1, H, W]). Reports the
classes present with their share of the image's pixels. Class scores are reduced to classes on
the CPU (the argmax that compiled models leave out), and the map is brought back to the
original size (nearest). Results stream as they are produced; a bad image gives an error record
and the batch goes on (exit code 3 at the end).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from edgeapp.core.eval.metrics import IGNORE, SegmentationMetrics, add_masks, segmentation_metrics
from edgeapp.core.limits import MAX_CLASSES
from edgeapp.core.vision.overlay import draw_classes, draw_mask
from edgeapp.core.vision.segmentation import (
    class_map,
    class_shares,
    is_segmentation_output,
    mask_image_array,
    mask_to_original,
)
from edgeapp.errors import UsageError
from edgeapp.tasks import TaskFields
from edgeapp.tasks.base import (
    RESIZE,
    Entity,
    Prepared,
    Result,
    Scorer,
    TaskKind,
    TaskOption,
    event_name,
    item_name,
)
from edgeapp.tasks.model import output_quantization

if TYPE_CHECKING:
    from edgeapp.core.eval.data import EvalData
    from edgeapp.hw.runtime import Engine
    from edgeapp.tasks.base import ImageFolderLike

EVENT_SHARE = 0.05  # events: a class counts as present from this share of the image


class Segment(TaskKind):
    """The class of every pixel; records list the classes present with their share of the image:
    {"classes": [{"id", "label", "share"}], "mask": where --mask wrote the map, or None}.

    The map is brought back to the image's size (nearest); it travels beside the record
    (Result.extras["mask"]) for overlays and --mask files.
    """

    name = "segment"
    field = "classes"
    noun = "a segmentation model"
    wanted = "segmentation outputs ([1, H, W, C] class scores or a [1, H, W] class map)"
    columns = ("rank", "id", "label", "share", "mask")
    options = (
        RESIZE,
        TaskOption("mask", None, "Write each image's class map, at the image's size, as a PNG of "
                   "class ids (8-bit, 16-bit beyond 255 classes) into DIR.", type=Path,
                   metavar="DIR", paths=("command",), folder="class maps"),
    )
    events = "presence"
    nothing = "(no class)"
    guess_rank = 2
    evaluates = "segmentation"

    def claims(self, shapes, ops, input_size=None) -> bool:
        return len(shapes) == 1 and is_segmentation_output(shapes[0], input_size)

    def plan(self, engine: Engine, options: dict) -> tuple:
        if not self.claims_engine(engine):
            raise self.refuse(engine)
        return output_quantization(engine)

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        full = mask_to_original(class_map(outputs[0], *plan), prepared.fit)
        shape = tuple(getattr(outputs[0], "shape", ()))  # class scores: the model's class count
        count = max(2, int(shape[-1])) if len(shape) == 4 else None  # (2 for one score channel)
        return Result({"classes": class_shares(full, labels), "mask": None},
                      {"mask": full, "class_count": count})

    def empty(self) -> TaskFields:
        return {"classes": [], "mask": None}

    def rows(self, fields: TaskFields):
        return [{"rank": r, **c, "mask": fields.get("mask")}
                for r, c in enumerate(fields["classes"], 1)] or [{"mask": fields.get("mask")}]

    def item_text(self, item: dict) -> str:
        return f"{item_name(item)} {item['share'] * 100:.1f}%"

    def summary_text(self, fields: TaskFields) -> str:
        where = f"  [mask {fields['mask']}]" if fields.get("mask") else ""
        return super().summary_text(fields) + where

    def draw(self, img, fields: TaskFields, extras: dict) -> None:
        if extras.get("mask") is not None:
            draw_mask(img, extras["mask"], fields["classes"])
        else:  # a record without its map (another process's): the classes at least
            draw_classes(img, [{**c, "score": c["share"]} for c in fields["classes"]])

    def api_value(self, result: Result) -> tuple:
        """(classes present, class map at the image's size)."""
        return result.fields["classes"], result.extras["mask"]

    def to_folder(self, option: TaskOption, folder: ImageFolderLike, path: str, result: Result) -> TaskFields:
        """--mask: the class map as a PNG of class ids; the record says where."""
        return {"mask": str(folder.write(path, mask_image_array(result.extras["mask"]), ".png"))}

    def scorer(self, data: EvalData, labels: Optional[dict]) -> Scorer:
        return MaskScorer(data, labels)

    def presence(self, fields: TaskFields) -> Dict[Any, tuple]:
        return {event_name(c): (1, c["share"]) for c in fields.get("classes") or []
                if c["share"] >= EVENT_SHARE}

    def discovery(self, labels: Optional[dict]) -> List[Entity]:
        """The classes present (from EVENT_SHARE of the image), as one text sensor."""
        return [Entity("classes", "classes present", frames=(
            f"{{% for c in value_json.classes if c.share >= {EVENT_SHARE} %}}{{{{ ', ' if not loop.first else '' }}}}"
            "{{ c.label if c.label is not none else c.id }}{% else %}none{% endfor %}"),
            state="{{ value_json.labels | join(', ') if value_json.labels else 'none' }}")]


class MaskScorer(Scorer):
    """mIoU, pixel accuracy and per-class IoU over every labelled pixel (255 = ignore); mask
    values are the model's class ids: one beyond the model's classes (its labels, else the
    data's labels.txt) is exit 2 naming the mask, checked by the mask's largest value, so no
    count is ever sized by what a mask holds."""

    def __init__(self, data: EvalData, labels: Optional[dict]) -> None:
        import numpy as np

        self.data, self.notes, self.plot = data, [], {}
        self.names = labels or {int(k): v for k, v in data.names.items()}
        self.classes = max(int(k) for k in self.names) + 1 if self.names else None
        size = self.classes or 0
        self.counts = np.zeros((size, size), dtype=np.int64)
        self.rows: Dict[int, dict] = {}

    def add(self, index: int, result: Result) -> None:
        import numpy as np

        predicted = result.extras["mask"]
        path = self.data.truth[index]
        truth = read_mask(path, (predicted.shape[1], predicted.shape[0]))
        labelled = truth[truth != IGNORE]
        top = int(labelled.max()) if labelled.size else -1
        limit = self.classes or result.extras.get("class_count") or MAX_CLASSES
        if labelled.size and int(labelled.min()) < 0:
            raise UsageError(f"{path}: mask value {int(labelled.min())} is negative; values are class "
                             f"ids 0..{limit - 1} or {IGNORE} (not labelled)")
        if top >= limit:
            raise UsageError(f"{path}: mask value {top} is not a class of the model (0..{limit - 1}) "
                             f"nor {IGNORE} (not labelled)")
        most = int(predicted.max()) if predicted.size else -1
        size = max(top, min(most, MAX_CLASSES - 1)) + 1
        if size > self.counts.shape[0]:
            grown = np.zeros((size, size), dtype=np.int64)
            grown[:self.counts.shape[0], :self.counts.shape[0]] = self.counts
            self.counts = grown
        add_masks(self.counts, truth, predicted)
        self.rows[index] = {"image": self.data.ids[index], "classes": result.fields["classes"]}

    def metrics(self, done: List[int]) -> SegmentationMetrics:
        if done and not self.counts.sum():
            raise UsageError(f"labelled data {self.data.source}: nothing to measure: no mask has a "
                             f"labelled pixel (every value is {IGNORE})")
        out = segmentation_metrics(self.counts, self.names)
        self.plot = {"kind": "iou", "per_class": out["per_class"]}
        return out

    def predictions(self) -> List[dict]:
        return [self.rows[i] for i in sorted(self.rows)]


def read_mask(path: str, size: Optional[tuple] = None) -> Any:
    """A mask PNG's class ids (a one-channel image; 16-bit for more than 255 classes), which
    must be `size` (width, height) when given: checked from its header, before decoding."""
    import os

    import numpy as np
    from PIL import Image

    if not os.path.isfile(path):
        raise UsageError(f"{path}: the mask is not a regular file")
    try:
        with Image.open(path) as img:
            if img.mode not in ("L", "P", "I", "I;16", "I;16B", "I;16L"):
                raise UsageError(f"{path}: a mask is one channel of class ids, not {img.mode}")
            if size is not None and tuple(img.size) != tuple(size):
                raise UsageError(f"{path}: mask {img.size[0]}x{img.size[1]} is not the size of its "
                                 f"image ({size[0]}x{size[1]})")
            return np.asarray(img)
    except Image.DecompressionBombError:
        raise UsageError(f"{path}: the mask is too large (more pixels than any image measured)") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise UsageError(f"{path}: cannot read the mask ({e})") from None


KIND = Segment()
