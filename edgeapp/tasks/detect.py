"""Detect objects in images on the Edge TPU, or on the CPU when none is usable.

MODEL: a detection model ending in the TFLite detection post-process op (SSD MobileNet,
EfficientDet-Lite...), or a YOLO export (Ultralytics YOLOv8/11/v5u `*_full_integer_quant` and
its `_edgetpu` build, classic YOLOv5, split DFL), decoded and NMS'd as Ultralytics does. Boxes
are [xmin, ymin, xmax, ymax] in the original image's pixels. Results stream to stdout (or
--output) as they are produced; a bad image gives an error record and the batch goes on (exit
code 3 at the end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import numpy as np

from edgeapp.core.eval.coco import BoxMetrics, box_summary, coco_evaluate, means_over, pr_curves
from edgeapp.core.eval.metrics import match_names
from edgeapp.core.vision.box_filters import NAMES as FILTERS
from edgeapp.core.vision.box_filters import BoxFilters, filter_boxes
from edgeapp.core.vision.boxes import letterbox_fit, translate
from edgeapp.core.vision.detect import Object, engine_layout, get_objects, object_fields
from edgeapp.core.vision.motion import MotionFrame
from edgeapp.core.vision.overlay import draw_objects
from edgeapp.core.vision.preprocess import decode_image
from edgeapp.core.vision.tiles import DEFAULT_OVERLAP, Tiles, Window, merge, parse_tiles, windows
from edgeapp.core.vision.yolo import (
    CONF,
    IOU,
    LAYOUTS,
    MAX_DET,
    YOLO_MEAN,
    YOLO_STD,
    engine_yolo_layout,
    get_yolo_objects,
    is_yolo_output,
    letterbox_tensor,
    output_quantizations,
)
from edgeapp.errors import InvalidModel, UsageError
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
    jinja_literal,
    kept_image,
)
from edgeapp.tasks.model import InputSpec

if TYPE_CHECKING:
    from edgeapp.core.eval.data import EvalData
    from edgeapp.core.eval.schema import CocoTruth
    from edgeapp.core.vision.detect import SsdLayout
    from edgeapp.core.vision.preprocess import ImageSource
    from edgeapp.core.vision.yolo import YoloLayout
    from edgeapp.hw.runtime import Engine
    from edgeapp.tasks.model import ImageModel

DECODERS = ("auto", "ssd") + LAYOUTS
SSD_THRESHOLD = 0.4
EVAL_THRESHOLD, EVAL_MAX_DET = 0.001, 300  # what mAP is measured at (Ultralytics' val too)


@dataclass(frozen=True)
class DetectPlan:
    decoder: str  # "ssd" or a YOLO layout name
    layout: Union[SsdLayout, YoloLayout]
    quantization: list  # (scale, zero point) per output
    threshold: float  # the option, else this decoder's default
    floor: float  # boxes kept down to this score: the threshold, lower when tracking
    filters: BoxFilters = BoxFilters()  # area and ratio bounds (core/vision/box_filters.py)


class Detect(TaskKind):
    """Objects as boxes in the original image's pixels, best first: {"objects": [{"id", "label",
    "score", "bbox": [xmin, ymin, xmax, ymax]}]}.

    Two families of models, told apart by their outputs (or named with the `decoder` option):
    - ssd: models ending in TFLite's detection post-process op (SSD MobileNet, EfficientDet-Lite),
      four outputs that core/vision/detect.py recognises and reads; images stretched (or letterboxed)
      with LANCZOS, as Coral's examples do;
    - yolov8, yolov5, dfl: YOLO exports (Ultralytics v8/11/v5u, classic v5, split DFL), decoded
      and NMS'd on the host by core/vision/yolo.py exactly as Ultralytics' predictor does, on images
      letterboxed as Ultralytics letterboxes them (grey 114, centred, linear resize).
    """

    name = "detect"
    field = "objects"
    noun = "a detection model"
    wanted = ("a detection model's outputs (the TFLite detection post-process op's four, or a "
              "YOLO export's)")
    columns = ("rank", "id", "label", "score", "xmin", "ymin", "xmax", "ymax")
    options = (
        TaskOption("threshold", None, "Minimum score of an object.", ("--threshold", "-t"),
                   type=float, default_text=f"{SSD_THRESHOLD} for SSD models, {CONF} for YOLO, as "
                                            "Ultralytics"),
        TaskOption("top_k", None, "At most this many objects per image, best first.",
                   ("--top-k", "-k"), type=int, min=1, default_text="all above the threshold"),
        RESIZE,
        TaskOption("decoder", "auto", "How detection outputs are read: auto (from their shapes), "
                   "ssd (the TFLite post-process op), yolov8 (Ultralytics v8/11/v5u, also "
                   "transposed), yolov5 (classic, with objectness) or dfl (split box logits and "
                   "class scores).", choices=DECODERS),
        TaskOption("iou", IOU, "YOLO: boxes of a class overlapping a better one by more than this "
                   "(IoU) are dropped (NMS).", min=0.0, max=1.0),
        TaskOption("max_det", MAX_DET, "YOLO: at most this many objects per image after NMS.",
                   min=1),
        TaskOption("min_area", None, "Drop boxes smaller than this: pixels, or a fraction of the "
                   "image when at most 1 (0.01: 1% of it). Records count the boxes dropped.",
                   type=float, min=0.0, metavar="AREA", default_text="none"),
        TaskOption("max_area", None, "Drop boxes larger than this: pixels, or a fraction of the "
                   "image when at most 1.", type=float, min=0.0, metavar="AREA", default_text="none"),
        TaskOption("min_ratio", None, "Drop boxes whose width / height is below this (0.5: twice "
                   "as tall as wide).", type=float, min=0.0, metavar="RATIO", default_text="none"),
        TaskOption("max_ratio", None, "Drop boxes whose width / height is above this.", type=float,
                   min=0.0, metavar="RATIO", default_text="none"),
        TaskOption("then", None, "A cascade: run a second model on the crop of each box, with its "
                   "own preprocessing, and add its result to the box (classify: the box's "
                   "`classes`, top-k as classify writes them): TASK:MODEL, e.g. "
                   "classify:birds.tflite.", type=str, metavar="TASK:MODEL",
                   default_text="no second model"),
        TaskOption("on", None, "With --then: only boxes of these labels go to the second model "
                   "(comma-separated, e.g. bird,cat).", type=str, metavar="LABEL[,LABEL]",
                   default_text="every box"),
        TaskOption("then_every", 15, "With --then and --track: a track's crop runs the second "
                   "model again only after this many frames (or when its box has grown by half).",
                   min=1, paths=("camera", "api")),
        TaskOption("tiles", None, "Small objects: run the model on COLS x ROWS overlapping windows "
                   "of each image or frame (OVERLAP a fraction of a window, default "
                   f"{DEFAULT_OVERLAP:g}) and once on the whole, then merge the boxes: "
                   "COLSxROWS[:OVERLAP], e.g. 2x2 (5 inferences per image).", type=str,
                   metavar="COLSxROWS[:OVERLAP]", default_text="the whole frame only"),
        TaskOption("motion", False, "Videos from a still camera: run the model only on the regions "
                   "that moved since the frames before, each cropped at its native resolution "
                   "(at least the model's input size), and merge their boxes; a frame where "
                   "nothing moved costs no inference. Objects that stop are not looked for "
                   "until they move again.", ("--motion",), type=bool, paths=("camera", "api")),
        TaskOption("track_low", None, "With --track: boxes down to this score keep a track alive "
                   "(ByteTrack's second round); only boxes above --threshold start tracks and are "
                   "shown.", type=float, min=0.0, max=1.0, paths=("camera", "api"),
                   default_text="0.1 with --track"),
    )
    events = "presence"
    nothing = "(no object above threshold)"
    guess_rank = 1
    ultralytics_task = "detect"  # YOLO detection exports (not -seg, -pose, -cls, -obb)
    evaluates = "detection"
    eval_options = {"threshold": EVAL_THRESHOLD, "max_det": EVAL_MAX_DET}  # as COCO evaluation expects
    tracks = "objects"

    def claims(self, shapes, ops, input_size=None) -> bool:
        return len(shapes) == 4 or (input_size is not None and is_yolo_output(shapes, input_size))

    def plan_for(self, model: ImageModel, engine: Engine, options: dict) -> DetectPlan:
        """The YOLO output layout a `convert` sidecar names, when it has one."""
        return self.plan(engine, options, (model.meta.extra or {}).get("yolo"))

    def plan(self, engine: Engine, options: dict, sidecar: Optional[dict] = None) -> DetectPlan:
        decoder = options["decoder"]
        quant = output_quantizations(engine)
        if decoder == "ssd" or (decoder == "auto" and len(engine.outputs) == 4):
            return _plan("ssd", self._ssd_layout(engine), quant,
                         given_or(options["threshold"], SSD_THRESHOLD), options)
        try:
            layout = engine_yolo_layout(engine, None if decoder == "auto" else decoder, sidecar)
        except InvalidModel:
            if decoder == "auto":  # neither family: name the task these outputs are for
                raise self.refuse(engine) from None
            raise
        return _plan(layout.kind, layout, quant, given_or(options["threshold"], CONF), options)

    def _ssd_layout(self, engine: Engine) -> Any:
        """The post-process op's four outputs; another model named for what it is (a YOLO
        export read with --decoder ssd, a classifier...)."""
        try:
            return engine_layout(engine)
        except InvalidModel as e:
            from edgeapp.tasks import guess_task

            found = guess_task(engine)
            if found == self.name:  # a YOLO export
                raise InvalidModel(f"{e}; it is a YOLO export: leave --decoder auto") from None
            if found is not None:
                raise self.refuse(engine) from None
            raise

    def settle(self, given: Optional[dict] = None) -> dict:
        options = super().settle(given)
        if options.get("tiles") is not None:
            try:
                parse_tiles(options["tiles"])
            except ValueError as e:
                raise UsageError(str(e)) from None
            if options.get("motion"):
                raise UsageError("--tiles and --motion both choose where the model looks: pick one")
        return options

    def prepare(self, source: ImageSource, spec: InputSpec, options: dict, plan: Optional[DetectPlan] = None,
                keep_image: bool = False) -> tuple:
        if options.get("tiles"):  # the whole photo, cut into windows
            decoded = decode_image(source, spec.channels, None, "letterbox")
            pixels = np.asarray(decoded.image, dtype=np.uint8)
            tensors, prepared = self._tiles(pixels[:, :, ::-1] if pixels.ndim == 3 else pixels,
                                            spec, options, plan)
            image = kept_image(decoded, source, spec) if keep_image else None
            return tensors, Prepared(prepared.fit, image, source, prepared.tiles)
        if plan is None or plan.decoder == "ssd":
            return super().prepare(source, spec, options, plan, keep_image)
        decoded = decode_image(source, spec.channels, spec.decode_size, "letterbox")
        tensor, fit = _yolo_input(np.asarray(decoded.image, dtype=np.uint8), spec)
        return tensor, Prepared(decoded.fit_of_photo(fit),
                                kept_image(decoded, source, spec) if keep_image else None, source)

    def _tiles(self, frame: np.ndarray, spec: InputSpec, options: dict, plan: Optional[DetectPlan]) -> tuple:
        """Each window of a BGR (or grey) frame fitted into its own input tensor."""
        h, w = frame.shape[:2]
        return self._windows(frame, windows(w, h, parse_tiles(options["tiles"])), spec, options, plan)

    def _windows(self, frame: np.ndarray, chosen: List[Window], spec: InputSpec, options: dict,
                 plan: Optional[DetectPlan]) -> tuple:
        """Each of `chosen` windows of a frame fitted into its own input tensor (none: no
        inference, and no object)."""
        h, w = frame.shape[:2]
        tensors, tiles = [], []
        for window in chosen:
            x0, y0, x1, y1 = window
            crop = np.ascontiguousarray(frame[y0:y1, x0:x1])
            tensor, prepared = self.prepare_frame(crop, spec, {**options, "tiles": None}, plan)
            tensors.append(tensor)
            tiles.append((window, prepared.fit))
        whole = tiles[-1][1] if chosen and chosen[-1] == (0, 0, w, h) else letterbox_fit((w, h), spec.size)
        return Tiles(tuple(tensors)), Prepared(whole, tiles=tuple(tiles))

    def prepare_frame(self, frame: Union[np.ndarray, MotionFrame], spec: InputSpec, options: dict,
                      plan: Optional[DetectPlan] = None) -> tuple:
        if isinstance(frame, MotionFrame):  # --motion: the regions that moved
            h, w = frame.image.shape[:2]
            if frame.regions == [(0, 0, w, h)]:
                return self.prepare_frame(frame.image, spec, options, plan)
            return self._windows(frame.image, frame.regions, spec, options, plan)
        if options.get("tiles"):
            return self._tiles(frame, spec, options, plan)
        if plan is None or plan.decoder == "ssd":
            return super().prepare_frame(frame, spec, options, plan)
        import cv2

        if frame.ndim == 2 or frame.shape[2] == 1:
            pixels = frame if spec.channels == 1 else cv2.cvtColor(frame, cv2.COLOR_GRAY2RGB)
        else:
            code = cv2.COLOR_BGR2GRAY if spec.channels == 1 else cv2.COLOR_BGR2RGB
            pixels = cv2.cvtColor(frame[:, :, :3], code)
        tensor, fit = _yolo_input(pixels, spec)
        return tensor, Prepared(fit)

    def interpret(self, outputs, prepared: Prepared, plan: DetectPlan, options: dict,
                  labels: Optional[dict]) -> Result:
        if prepared.tiles or not outputs:  # one set of outputs per window (none: nothing moved)
            found = [Object(o.id, o.score, translate(o.bbox, window[0], window[1]))
                     for out, (window, fit) in zip(outputs, prepared.tiles)
                     for o in self._objects(out, fit, plan, options, None)]
            keep = merge(np.array([o.bbox.as_list() for o in found]).reshape(-1, 4),
                         np.array([o.score for o in found]), np.array([o.id for o in found]),
                         max_det=options["max_det"])
            objects = [found[i] for i in keep.tolist()][:options["top_k"]]
        else:
            objects = self._objects(outputs, prepared.fit, plan, options, options["top_k"])
        fields = {"objects": object_fields(objects, labels)}
        boxes = [o.bbox.as_list() for o in objects]  # unrounded, for eval
        if plan.filters.active:  # --min-area, --max-area, --min-ratio, --max-ratio
            kept, removed = filter_boxes(fields["objects"], prepared.fit.src_w, prepared.fit.src_h,
                                         plan.filters)
            ids = {id(o) for o in kept}
            boxes = [b for o, b in zip(fields["objects"], boxes) if id(o) in ids]
            fields = {"objects": kept, "filtered": removed}
        return Result(fields, {"boxes": boxes})

    @staticmethod
    def _objects(outputs, fit, plan: DetectPlan, options: dict, top_k: Optional[int]) -> list:
        if plan.decoder == "ssd":
            return get_objects(outputs, plan.layout, fit, plan.quantization, plan.floor, top_k)
        objects = get_yolo_objects(outputs, plan.quantization, plan.layout, fit, plan.floor,
                                   options["iou"], options["max_det"])
        return objects[:top_k] if top_k is not None else objects

    def track_threshold(self, plan: DetectPlan) -> float:
        return plan.threshold

    def rows(self, fields: TaskFields) -> List[dict]:
        rows = []
        for r, o in enumerate(fields["objects"], 1):
            x0, y0, x1, y1 = o["bbox"]
            rows.append({"rank": r, "id": o["id"], "label": o["label"], "score": o["score"],
                         "xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1,
                         **({"track_id": o["track_id"]} if "track_id" in o else {})})  # camera --track
        return rows

    def item_text(self, item: dict) -> str:
        return f"{item_name(item)} {item['score']:.2f} [{', '.join(str(v) for v in item['bbox'])}]"

    def summary_text(self, fields: TaskFields) -> str:
        objects = fields["objects"]
        if not objects:
            return self.nothing
        return f"{len(objects)} object(s): " + " | ".join(self.item_text(o) for o in objects)

    def draw(self, img, fields: TaskFields, extras: dict) -> None:
        draw_objects(img, fields["objects"])

    def class_count(self, plan: DetectPlan) -> Optional[int]:
        """A YOLO export's class count is its outputs' (an SSD's post-process op hides it)."""
        return None if plan.decoder == "ssd" else plan.layout.classes

    def scorer(self, data: EvalData, labels: Optional[dict]) -> Scorer:
        return BoxScorer(data, labels)

    def presence(self, fields: TaskFields) -> Dict[Any, tuple]:
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


class BoxScorer(Scorer):
    """COCO mAP50-95, mAP50 and per-class AP (pycocotools) of every box; the model's classes
    matched to the data's categories by name (Coral's SSD models number COCO's 90 with gaps,
    YOLO exports 80 contiguous ones), by index when the data has no names. A data class the
    model lacks is said with its share of the objects; when it lowers the mean, the metrics
    have the mean over the model's classes too (`map_model_classes`, `map50_model_classes`)."""

    coco_results = "bbox"

    def __init__(self, data: EvalData, labels: Optional[dict]) -> None:
        self.data, self.labels = data, labels
        data.check_model_classes(labels)  # unnamed data: ids beyond the model's are exit 2
        if data.named:
            self.to_data, unknown = match_names(labels, data.names)
        else:  # the data's ids are the model's (only those used are among the data's names)
            self.to_data, unknown = {k: k for k in data.names}, []
        if labels and data.named and not self.to_data:
            raise InvalidModel(f"none of the data's classes ({', '.join(list(data.names.values())[:5])}"
                               "...) is among the model's labels")
        found = set(self.to_data.values())
        self.unknown = [k for k in data.names if k not in found]
        share = data.truth_share(self.unknown)
        if self.unknown and share >= 1.0:
            raise UsageError(f"labelled data {data.source}: nothing to measure: every object is of a "
                             f"class the model does not have ({', '.join(unknown[:5])})")
        self.notes = [f"the model has no class {', '.join(unknown)} ({share:.1%} of the objects): "
                      "AP 0 for them"] if unknown else []
        self.results: List[dict] = []
        self.plot: dict = {}

    def add(self, index: int, result: Result) -> None:
        boxes = result.extras.get("boxes") or [o["bbox"] for o in result.fields["objects"]]
        for o, (x0, y0, x1, y1) in zip(result.fields["objects"], boxes):
            cat = self.to_data.get(o["id"])
            if cat is not None:
                self.results.append({"image_id": index, "category_id": cat, "score": round(o["score"], 5),
                                     "bbox": [round(x0, 3), round(y0, 3), round(x1 - x0, 3),
                                              round(y1 - y0, 3)]})

    def metrics(self, done: List[int]) -> BoxMetrics:
        gt = self._named_truth()
        ev = coco_evaluate(gt, self.results, "bbox", done)
        names = {c["id"]: c["name"] for c in gt["categories"]}
        self.plot = {"kind": "pr", "curves": pr_curves(ev, names)}
        out = box_summary(ev, gt)
        if self.unknown:
            known = means_over(ev, set(self.to_data.values()))
            if known is not None and (round(known[0], 4), round(known[1], 4)) != (
                    round(out["map"], 4), round(out["map50"], 4)):
                out["map_model_classes"], out["map50_model_classes"] = known
        return out

    def _named_truth(self) -> CocoTruth:
        """The data's ground truth, its classes named by the model's labels (its sidecar's or
        metadata's names) when the data has only numbers (YOLO labels without names)."""
        if self.data.named or not self.labels:
            return self.data.coco
        by_cat = {cat: self.labels[i] for i, cat in self.to_data.items() if i in self.labels}
        return dict(self.data.coco, categories=[dict(c, name=str(by_cat.get(c["id"], c["name"])))
                                                for c in self.data.coco["categories"]])

    def predictions(self) -> List[dict]:
        """A COCO results list in the data's own image and category ids."""
        return [dict(r, image_id=self.data.ids[r["image_id"]],
                     category_id=self.data.own_category(r["category_id"])) for r in self.results]


def _yolo_input(pixels: np.ndarray, spec: InputSpec) -> tuple:
    """Ultralytics' letterbox, then pixel / 255 unless the flags or the model's metadata say
    otherwise: ((1, H, W, C) tensor, Fit)."""
    mean, std = (spec.mean, spec.std) if spec.normalization_given else (YOLO_MEAN, YOLO_STD)
    return letterbox_tensor(pixels, spec.size, spec.dtype, spec.scale, spec.zero_point, mean, std)


def _plan(decoder: str, layout: Union[SsdLayout, YoloLayout], quant: list, threshold: float,
          options: dict) -> DetectPlan:
    """With --track (`track_low` given) boxes down to it are kept for the tracker, which shows
    only those above the threshold (or on a track)."""
    low = options.get("track_low")
    filters = BoxFilters(*(options.get(n) for n in FILTERS)).check()
    return DetectPlan(decoder, layout, quant, threshold, threshold if low is None else min(threshold, low),
                      filters)


def given_or(value: Optional[float], default: float) -> float:
    """An option's value, else the decoder's default for it."""
    return default if value is None else float(value)

