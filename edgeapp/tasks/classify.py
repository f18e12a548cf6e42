"""classify: the top-k classes of an image, best first ({"classes": [{"id", "label", "score"}]})."""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from edgeapp.core.classify import class_fields, get_classes_from_scores, get_scores
from edgeapp.errors import InvalidModel
from edgeapp.tasks.base import Entity, Prepared, Result, TaskKind, event_name, use
from edgeapp.tasks.model import ImageModel, describe_outputs, output_quantization


class Classify(TaskKind):
    name = "classify"
    field = "classes"
    noun = "a classifier"
    wanted = "one score vector"
    columns = ("rank", "id", "label", "score")
    defaults = {"top_k": 5, "threshold": 0.0}
    events = "top"
    nothing = "(no class above threshold)"
    guess_rank = 9  # any one output: asked last

    def claims(self, shapes, ops, input_size=None) -> bool:
        return len(shapes) == 1

    def plan(self, engine: Any, options: dict) -> tuple:
        from edgeapp.tasks import guess_task, kind

        found = guess_task(engine)
        if found not in (None, self.name):
            raise InvalidModel(f"{engine.model_path} is {kind(found).noun} (output "
                               f"{describe_outputs(engine)}), not a classifier: {use(found)}")
        if len(engine.outputs) != 1:
            raise InvalidModel(f"{engine.model_path} has {len(engine.outputs)} outputs; a classifier "
                               "has one")
        return output_quantization(engine)

    def warnings(self, model: ImageModel, labels_file: Any = None) -> List[str]:
        """An embedding extractor (its values are features, not class scores); labels that do
        not fit the class vector."""
        from edgeapp.core.embedding import embedding_note
        from edgeapp.core.labels import label_count_warning

        classes = int(np.prod(model.engine.outputs[0]["shape"]))
        source = f"--labels {labels_file}" if labels_file else "the model's labels"
        notes = [embedding_note(model.engine.model),
                 label_count_warning(model.labels, classes, source)]
        return [n for n in notes if n]

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        scores = get_scores(outputs[0], *plan)
        classes = get_classes_from_scores(scores, options["top_k"], options["threshold"])
        return Result({"classes": class_fields(classes, labels)})

    def draw(self, img, fields: dict, extras: dict) -> None:
        from edgeapp.core.overlay import draw_classes

        draw_classes(img, fields["classes"])

    def top(self, fields: dict) -> Optional[tuple]:
        classes = fields.get("classes") or []
        return (event_name(classes[0]), classes[0]["score"]) if classes else None

    def discovery(self, labels: Optional[dict]) -> List[Entity]:
        """The top class (and, per frame, its score); `none` when nothing passes --threshold."""
        first = "{% set c = value_json.classes %}"
        return [Entity("top_class", "top class",
                       frames=first + "{{ (c[0].label if c[0].label is not none else c[0].id) "
                                      "if c else 'none' }}",
                       state="{{ value_json.label if value_json.label is not none else 'none' }}"),
                Entity("top_score", "top score", frames=first + "{{ c[0].score if c else 0 }}",
                       numeric=True)]


KIND = Classify()
