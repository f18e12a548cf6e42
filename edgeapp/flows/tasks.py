"""What each inference command does with one image, shared by the CLI, the camera and the API.

A Task turns an image into the model's input (`prepare`, run ahead on worker threads), reads the
raw outputs back into record fields (`interpret`), and names the fields of a failed record
(`empty`). The records are the JSONL records `classify`/`detect`/`pose`/`segment` print.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from edgeapp.core.classify import class_fields, get_classes_from_scores, get_scores
from edgeapp.core.detect import engine_layout, get_objects, object_fields, prepare_detection
from edgeapp.flows.batch import ImageModel, Task, classifier_output, require_task


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


def pose_task(model: ImageModel, threshold: float = 0.2, resize: str = "stretch",
              annotate: Optional[Callable[[Any, Any, list], None]] = None) -> Task:
    """The pose of a MoveNet model (or the poses of a PoseNet decoder op), keypoints scoring at
    least `threshold`, in the original image's pixels. Images are resized as libcoral does.

    `annotate(image_source, decoded_image, poses)` is called per image when given.
    """
    from edgeapp.core.pose import POSENET_OP, movenet_pose, pose_fields, posenet_poses, prepare_pose

    engine, spec = model.engine, model.spec
    posenet = POSENET_OP in {op.op for op in engine.model.operators}
    if not posenet:
        require_task(engine, "pose", "a MoveNet single-pose output [1, 1, 17, 3]")
    scale, zero = engine.outputs[0].get("quantization", (0.0, 0))

    def prepare(image) -> tuple:
        tensor, context = prepare_pose(image, spec, resize, keep_image=annotate is not None)
        return tensor, {**context, "source": image}

    def interpret(outputs: list, context) -> dict:
        fit = context["fit"]
        poses = posenet_poses(outputs, fit) if posenet else \
            [movenet_pose(outputs[0], fit, float(scale), int(zero))]
        fields = pose_fields(poses, threshold)
        if annotate is not None:
            annotate(context["source"], context["image"], fields)
        return {"poses": fields}

    return Task("pose", prepare, interpret, {"poses": []})


def segment_task(model: ImageModel, resize: str = "stretch",
                 on_mask: Optional[Callable[[Any, Any, Any, list], Optional[str]]] = None) -> Task:
    """The classes present and their share of the pixels, from the class map brought back to
    the original image's size (nearest). Images are resized with LANCZOS, as pycoral does.

    `on_mask(image_source, decoded_image, class_map, classes)` is called per image when given;
    what it returns (where it wrote the map, or None) is the record's `mask`.
    """
    from edgeapp.core.segment import class_map, class_shares, to_original

    engine, spec, labels = model.engine, model.spec, model.labels
    require_task(engine, "segment", "segmentation outputs ([1, H, W, C] class scores or a "
                                    "[1, H, W] class map)")
    scale, zero = engine.outputs[0].get("quantization", (0.0, 0))

    def prepare(image) -> tuple:
        tensor, context = prepare_detection(image, spec, resize, keep_image=on_mask is not None)
        return tensor, {**context, "source": image}

    def interpret(outputs: list, context) -> dict:
        full = to_original(class_map(outputs[0], float(scale), int(zero)), context["fit"])
        classes = class_shares(full, labels)
        mask = on_mask(context["source"], context["image"], full, classes) if on_mask else None
        return {"classes": classes, "mask": mask}

    return Task("segment", prepare, interpret, {"classes": [], "mask": None})
