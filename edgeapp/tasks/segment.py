"""Segment images: the class of every pixel, on the Edge TPU or the CPU.

MODEL: a DeepLab-style model (class scores [1, H, W, C] or a class map [1, H, W]). Reports the
classes present with their share of the image's pixels. Class scores are reduced to classes on
the CPU (the argmax that compiled models leave out), and the map is brought back to the
original size (nearest). Results stream as they are produced; a bad image gives an error record
and the batch goes on (exit code 3 at the end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from edgeapp.core.segmentation import class_map, class_shares, is_segmentation_output, to_original
from edgeapp.tasks.base import (
    RESIZE,
    Entity,
    Prepared,
    Result,
    TaskKind,
    TaskOption,
    event_name,
    item_name,
)
from edgeapp.tasks.model import output_quantization

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

    def claims(self, shapes, ops, input_size=None) -> bool:
        return len(shapes) == 1 and is_segmentation_output(shapes[0], input_size)

    def plan(self, engine: Any, options: dict) -> tuple:
        if not self.claims_engine(engine):
            raise self.refuse(engine)
        return output_quantization(engine)

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        full = to_original(class_map(outputs[0], *plan), prepared.fit)
        return Result({"classes": class_shares(full, labels), "mask": None}, {"mask": full})

    def empty(self) -> dict:
        return {"classes": [], "mask": None}

    def rows(self, fields: dict):
        return [{"rank": r, **c, "mask": fields.get("mask")}
                for r, c in enumerate(fields["classes"], 1)] or [{"mask": fields.get("mask")}]

    def item_text(self, item: dict) -> str:
        return f"{item_name(item)} {item['share'] * 100:.1f}%"

    def summary_text(self, fields: dict) -> str:
        where = f"  [mask {fields['mask']}]" if fields.get("mask") else ""
        return super().summary_text(fields) + where

    def draw(self, img, fields: dict, extras: dict) -> None:
        from edgeapp.core.overlay import draw_classes, draw_mask

        if extras.get("mask") is not None:
            draw_mask(img, extras["mask"], fields["classes"])
        else:  # a record without its map (another process's): the classes at least
            draw_classes(img, [{**c, "score": c["share"]} for c in fields["classes"]])

    def api_value(self, result: Result) -> tuple:
        """(classes present, class map at the image's size)."""
        return result.fields["classes"], result.extras["mask"]

    def to_folder(self, option: TaskOption, folder: Any, path: str, result: Result) -> dict:
        """--mask: the class map as a PNG of class ids; the record says where."""
        from edgeapp.core.segmentation import mask_image_array

        return {"mask": str(folder.write(path, mask_image_array(result.extras["mask"]), ".png"))}

    def presence(self, fields: dict) -> Dict[Any, tuple]:
        return {event_name(c): (1, c["share"]) for c in fields.get("classes") or []
                if c["share"] >= EVENT_SHARE}

    def discovery(self, labels: Optional[dict]) -> List[Entity]:
        """The classes present (from EVENT_SHARE of the image), as one text sensor."""
        return [Entity("classes", "classes present", frames=(
            f"{{% for c in value_json.classes if c.share >= {EVENT_SHARE} %}}{{{{ ', ' if not loop.first else '' }}}}"
            "{{ c.label if c.label is not none else c.id }}{% else %}none{% endfor %}"),
            state="{{ value_json.labels | join(', ') if value_json.labels else 'none' }}")]


KIND = Segment()
