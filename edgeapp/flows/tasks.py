"""What each inference command does with one image, shared by the CLI, the camera and the API.

A Task turns an image into the model's input (`prepare`, run ahead on worker threads), reads the
raw outputs back into record fields (`interpret`), and names the fields of a failed record
(`empty`). The records are the JSONL records `classify`/`detect` print.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from edgeapp.core.classify import class_fields, get_classes_from_scores, get_scores
from edgeapp.core.detect import engine_layout, get_objects, object_fields, prepare_detection
from edgeapp.flows.batch import ImageModel, Task, classifier_output


def classify_task(model: ImageModel, top_k: int = 5, threshold: float = 0.0) -> Task:
    """Top-k classes scoring at least `threshold`, best first."""
    scale, zero = classifier_output(model.engine)
    spec, labels = model.spec, model.labels

    def prepare(image) -> tuple:
        return spec.prepare(image), None

    def interpret(outputs: list, _context) -> dict:
        scores = get_scores(outputs[0], scale, zero)
        return {"classes": class_fields(get_classes_from_scores(scores, top_k, threshold), labels)}

    return Task("classify", prepare, interpret, {"classes": []})


def detect_task(model: ImageModel, threshold: float = 0.4, top_k: Optional[int] = None,
                resize: str = "stretch",
                annotate: Optional[Callable[[Any, Any, list], None]] = None) -> Task:
    """Objects scoring at least `threshold`, boxes in the original image's pixels.

    `annotate(image_source, decoded_image, objects)` is called per image when given (detect's
    --annotate writes the drawn copy there).
    """
    engine, spec, labels = model.engine, model.spec, model.labels
    layout = engine_layout(engine)
    quant = [o.get("quantization", (0.0, 0)) for o in engine.outputs]

    def prepare(image) -> tuple:
        tensor, context = prepare_detection(image, spec, resize, keep_image=annotate is not None)
        return tensor, {**context, "source": image}

    def interpret(outputs: list, context) -> dict:
        objects = object_fields(get_objects(outputs, layout, context["fit"], quant, threshold, top_k),
                                labels)
        if annotate is not None:
            annotate(context["source"], context["image"], objects)
        return {"objects": objects}

    return Task("detect", prepare, interpret, {"objects": []})
