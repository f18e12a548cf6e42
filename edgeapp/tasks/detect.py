"""detect: objects as boxes in the original image's pixels ({"objects": [{"id", "label", "score",
"bbox": [xmin, ymin, xmax, ymax]}]}), best first.

Models ending in TFLite's detection post-process op (SSD MobileNet, EfficientDet-Lite) give four
outputs; core/detect.py recognises which is which and reads them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from edgeapp.core.detect import engine_layout, get_objects, object_fields
from edgeapp.tasks.base import Entity, Prepared, Result, TaskKind, event_name, item_name, jinja_literal


class Detect(TaskKind):
    name = "detect"
    field = "objects"
    noun = "a detection model"
    wanted = "a detection model's four outputs (boxes, classes, scores, count)"
    columns = ("rank", "id", "label", "score", "xmin", "ymin", "xmax", "ymax")
    defaults = {"threshold": 0.4, "top_k": None, "resize": "stretch"}
    events = "presence"
    nothing = "(no object above threshold)"
    guess_rank = 1

    def claims(self, shapes, ops) -> bool:
        return len(shapes) == 4

    def plan(self, engine: Any, options: dict) -> tuple:
        layout = engine_layout(engine)  # InvalidModel when these are no detection outputs
        return layout, [o.get("quantization", (0.0, 0)) for o in engine.outputs]

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        layout, quant = plan
        objects = get_objects(outputs, layout, prepared.fit, quant, options["threshold"],
                              options["top_k"])
        return Result({"objects": object_fields(objects, labels)})

    def rows(self, fields: dict) -> List[dict]:
        rows = []
        for r, o in enumerate(fields["objects"], 1):
            x0, y0, x1, y1 = o["bbox"]
            rows.append({"rank": r, "id": o["id"], "label": o["label"], "score": o["score"],
                         "xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1})
        return rows

    def item_text(self, item: dict) -> str:
        return f"{item_name(item)} {item['score']:.2f} [{', '.join(str(v) for v in item['bbox'])}]"

    def summary_text(self, fields: dict) -> str:
        objects = fields["objects"]
        if not objects:
            return self.nothing
        return f"{len(objects)} object(s): " + " | ".join(self.item_text(o) for o in objects)

    def draw(self, img, fields: dict, extras: dict) -> None:
        from edgeapp.core.overlay import draw_objects

        draw_objects(img, fields["objects"])

    def present(self, fields: dict) -> Dict[Any, tuple]:
        seen: dict = {}
        for o in fields.get("objects") or []:
            count, best = seen.get(event_name(o), (0, 0.0))
            seen[event_name(o)] = (count + 1, max(best, o["score"]))
        return seen

    def discovery(self, labels: Optional[dict]) -> List[Entity]:
        """Per frame: the objects, and the objects of each label; events: each label present."""
        out = [Entity("objects", "objects", frames="{{ value_json.objects | length }}", numeric=True)]
        for i, name in sorted((labels or {}).items()):
            out.append(Entity(f"count_{int(i)}", f"{name} count", numeric=True, frames=(
                f"{{{{ value_json.objects | selectattr('id', 'eq', {int(i)}) | list | length }}}}")))
            out.append(Entity(f"present_{int(i)}", str(name), "binary_sensor", state=(
                f"{{{{ 'ON' if {jinja_literal(name)} in value_json.labels else 'OFF' }}}}")))
        return out


KIND = Detect()
