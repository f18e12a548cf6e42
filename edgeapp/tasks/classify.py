"""Classify images on the Edge TPU, or on the CPU when none is usable.

MODEL: a classification .tflite model (uint8, int8 or float input). Results stream to stdout
(or --output) as they are produced; a bad image gives an error record and the batch goes on
(exit code 3 at the end).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional

import numpy as np

from edgeapp.core.learn.embedding import embedding_note
from edgeapp.core.vision.classify import (
    class_fields,
    get_classes_from_scores,
    get_scores,
    is_score_vector,
    label_count_warning,
)
from edgeapp.errors import UsageError
from edgeapp.tasks import TaskFields
from edgeapp.tasks.base import Entity, Prepared, Result, Scorer, TaskKind, TaskOption, event_name
from edgeapp.tasks.internal.embed import EMBED_TASK
from edgeapp.tasks.model import ImageModel, output_quantization, output_shapes

if TYPE_CHECKING:
    from edgeapp.core.eval.data import EvalData
    from edgeapp.core.eval.metrics import ClassificationMetrics
    from edgeapp.core.naming import PathLike
    from edgeapp.hw.runtime import Engine


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
    evaluates = "classification"
    eval_options = {"top_k": 5, "threshold": float("-inf")}  # every class ranked: logits can be < 0
    # scaled JPEG decode changed MobileNets' top-1 class on more than 1.5 % of photos
    # (docs/performance.md#decoding-photos-scaled-or-full): whole, unless --decode scaled
    decode = "full"

    def claims(self, shapes, ops, input_size=None) -> bool:
        return len(shapes) == 1 and is_score_vector(shapes[0])

    def plan(self, engine: Engine, options: dict) -> tuple:
        if not self.claims_engine(engine):
            raise self.refuse(engine)
        return output_quantization(engine)

    def warnings(self, model: ImageModel, labels_file: Optional[PathLike] = None) -> List[str]:
        """An embedding extractor (its values are features, not class scores); labels that do
        not fit the class vector."""
        source = f"--labels {labels_file}" if labels_file else "the model's labels"
        notes = [embedding_note(model.engine.model, declared=model.meta.task == EMBED_TASK),
                 self.labels_warning(model.labels, output_shapes(model.engine), source)]
        return [n for n in notes if n]

    def labels_warning(self, labels: Optional[dict], output_shapes, source: str) -> Optional[str]:
        """One label per score: a labels file of another size names other classes."""
        return label_count_warning(labels, int(np.prod(output_shapes[0])), source)

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        scores = get_scores(outputs[0], *plan)
        classes = get_classes_from_scores(scores, options["top_k"], options["threshold"])
        return Result({"classes": class_fields(classes, labels)})

    def scorer(self, data: EvalData, labels: Optional[dict]) -> Scorer:
        return ClassScorer(data, labels)

    def draw(self, img, fields: TaskFields, extras: dict) -> None:
        from edgeapp.core.vision.overlay import draw_classes

        draw_classes(img, fields["classes"])

    def top(self, fields: TaskFields) -> Optional[tuple]:
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


class ClassScorer(Scorer):
    """top1, top5 and per-class accuracy; the data's classes matched to the model's labels by
    name (without labels: the data's sorted class order)."""

    def __init__(self, data: EvalData, labels: Optional[dict]) -> None:
        from edgeapp.core.eval.metrics import match_names

        self.data, self.labels = data, labels
        to_data, unknown = match_names(labels, data.names)
        if labels and not to_data:
            raise UsageError(f"none of the data's classes ({', '.join(list(data.names.values())[:5])}"
                             "...) is among the model's labels")
        to_model = {k: i for i, k in to_data.items()}
        self.truth = [to_model.get(k, -1) for k in data.truth]  # -1: a class the model lacks
        share = data.truth_share([k for k in data.names if k not in to_model])
        if unknown and share >= 1.0:
            raise UsageError(f"labelled data {data.source}: nothing to measure: every image is of a "
                             f"class the model does not have ({', '.join(unknown[:5])})")
        self.notes = [f"the model has no class {', '.join(unknown)} ({share:.1%} of the images): "
                      "its images count as misses"] if unknown else []
        self.ranked: Dict[int, List[int]] = {}
        self.scores: Dict[int, List[dict]] = {}

    def add(self, index: int, result: Result) -> None:
        classes = result.fields["classes"]
        self.ranked[index] = [c["id"] for c in classes]
        self.scores[index] = classes

    def metrics(self, done: List[int]) -> ClassificationMetrics:
        from edgeapp.core.eval.metrics import classification_metrics, confusion

        names = self.labels or {i: str(n) for i, n in self.data.names.items()}
        truth = [self.truth[i] for i in done]
        out = classification_metrics(truth, [self.ranked[i] for i in done], names)
        if any(t < 0 for t in truth) and any(t >= 0 for t in truth):  # without the classes it lacks
            known = [n for n, t in enumerate(truth) if t >= 0]
            mine = classification_metrics([truth[n] for n in known],
                                          [self.ranked[done[n]] for n in known], names)
            out["top1_model_classes"], out["top5_model_classes"] = mine["top1"], mine["top5"]
        ids = sorted(names)
        size = max(ids) + 1 if ids else 0
        first = [self.ranked[i][0] if self.ranked[i] else -1 for i in done]
        self.plot = {"kind": "confusion", "names": [str(names.get(i, i)) for i in range(size)],
                     "matrix": confusion(truth, first, size)}
        return out

    def predictions(self) -> List[dict]:
        return [{"image": self.data.ids[i], "truth": self.data.names[self.data.truth[i]],
                 "classes": self.scores[i]} for i in sorted(self.scores)]


KIND = Classify()
