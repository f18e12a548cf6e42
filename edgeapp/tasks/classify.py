"""Classify images on the Edge TPU, or on the CPU when none is usable.

MODEL: a classification .tflite model (uint8, int8 or float input). Results stream to stdout
(or --output) as they are produced; a bad image gives an error record and the batch goes on
(exit code 3 at the end).
"""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from edgeapp.core.classify import class_fields, get_classes_from_scores, get_scores, is_score_vector
from edgeapp.tasks.base import Entity, Prepared, Result, TaskKind, TaskOption, event_name
from edgeapp.tasks.model import ImageModel, output_quantization


class Classify(TaskKind):
    """The top-k classes of an image, best first: {"classes": [{"id", "label", "score"}]}."""

    name = "classify"
    field = "classes"
    noun = "a classifier"
    wanted = "one score vector"
    columns = ("rank", "id", "label", "score")
    options = (
        TaskOption("top_k", 5, "Classes per image.", ("--top-k", "-k"), min=1),
        TaskOption("threshold", 0.0, "Minimum score to report.", ("--threshold", "-t")),
    )
    events = "top"
    nothing = "(no class above threshold)"
    guess_rank = 9  # any score vector: asked last

    def claims(self, shapes, ops, input_size=None) -> bool:
        return len(shapes) == 1 and is_score_vector(shapes[0])

    def plan(self, engine: Any, options: dict) -> tuple:
        if not self.claims_engine(engine):
            raise self.refuse(engine)
        return output_quantization(engine)

    def warnings(self, model: ImageModel, labels_file: Any = None) -> List[str]:
        """An embedding extractor (its values are features, not class scores); labels that do
        not fit the class vector."""
        from edgeapp.core.embedding import EMBED_TASK, embedding_note
        from edgeapp.tasks.model import output_shapes

        source = f"--labels {labels_file}" if labels_file else "the model's labels"
        notes = [embedding_note(model.engine.model, declared=model.meta.task == EMBED_TASK),
                 self.labels_warning(model.labels, output_shapes(model.engine), source)]
        return [n for n in notes if n]

    def labels_warning(self, labels: Optional[dict], output_shapes, source: str) -> Optional[str]:
        """One label per score: a labels file of another size names other classes."""
        from edgeapp.core.labels import label_count_warning

        return label_count_warning(labels, int(np.prod(output_shapes[0])), source)

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
