"""Estimate human poses: 17 COCO keypoints per image, on the Edge TPU or the CPU.

MODEL: a MoveNet single-pose model (output [1, 1, 17, 3]: y, x, score per keypoint), or a
PoseNet model where the runtime has Coral's PosenetDecoderOp. Keypoints are (x, y) in the
original image's pixels with their scores; images are resized as libcoral does it (bilinear),
so results match Coral's reference keypoints. Results stream as they are produced; a bad image
gives an error record and the batch goes on (exit code 3 at the end).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from edgeapp.core.eval.coco import KeypointMetrics, keypoint_metrics
from edgeapp.core.vision.overlay import draw_poses
from edgeapp.core.vision.pose import (
    KEYPOINTS,
    POSENET_OP,
    is_pose_output,
    movenet_pose,
    pose_fields,
    posenet_poses,
    posenet_refusal,
)
from edgeapp.tasks import TaskFields
from edgeapp.tasks.base import (
    RESIZE,
    Entity,
    Prepared,
    Result,
    Scorer,
    TaskKind,
    TaskOption,
    jinja_literal,
)
from edgeapp.tasks.model import op_names, output_quantization

if TYPE_CHECKING:
    from edgeapp.core.eval.data import EvalData
    from edgeapp.core.tflite.model import TfliteModel
    from edgeapp.hw.runtime import Engine

PERSON = "person"  # what pose events call a pose


class PoseKind(TaskKind):
    """17 COCO keypoints per person in the original image's pixels: {"poses": [{"score",
    "keypoints": [{"name", "x", "y", "score"}]}]}."""

    name = "pose"
    field = "poses"
    noun = "a pose estimation model"
    wanted = "a MoveNet single-pose output [1, 1, 17, 3] or a PoseNet decoder op"
    columns = ("pose", "pose_score", "keypoint", "x", "y", "score")
    options = (
        TaskOption("threshold", 0.2, "Minimum keypoint score to report (and draw).",
                   ("--threshold", "-t")),
        RESIZE,
    )
    labels = False  # keypoints have their own names
    instead_of_custom_ops = "MoveNet models (movenet_lightning, movenet_thunder) run everywhere"
    resample = "bilinear"
    events = "presence"
    nothing = "(no keypoint above threshold)"
    guess_rank = 0
    evaluates = "keypoints"
    eval_options = {"threshold": 0.0}  # every keypoint, scored: OKS weighs them all

    def claims(self, shapes, ops, input_size=None) -> bool:
        return POSENET_OP in ops or (len(shapes) == 1 and is_pose_output(shapes[0]))

    def unopenable(self, path: str, parsed: TfliteModel) -> Optional[str]:
        """PoseNet needs Coral's PosenetDecoderOp, which the runtimes here lack."""
        return posenet_refusal(path) if POSENET_OP in {op.op for op in parsed.operators} else None

    def plan(self, engine: Engine, options: dict) -> tuple:
        if not self.claims_engine(engine):
            raise self.refuse(engine)
        return POSENET_OP in op_names(engine), output_quantization(engine)

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        posenet, (scale, zero) = plan
        poses = posenet_poses(outputs, prepared.fit) if posenet else \
            [movenet_pose(outputs[0], prepared.fit, scale, zero)]
        return Result({"poses": pose_fields(poses, options["threshold"])})

    def scorer(self, data: EvalData, labels: Optional[dict]) -> Scorer:
        return KeypointScorer(data)

    def rows(self, fields: TaskFields) -> List[dict]:
        # a keypoint's rank is its pose's; its id is its COCO keypoint index
        return [{"pose": n, "pose_score": p["score"], "keypoint": k["name"], "x": k["x"],
                 "y": k["y"], "score": k["score"]}
                for n, p in enumerate(fields["poses"], 1) for k in p["keypoints"]]

    def item_text(self, item: dict) -> str:
        return f"pose {item['score']:.2f}: " + ", ".join(
            f"{k['name']} ({k['x']:.0f}, {k['y']:.0f}) {k['score']:.2f}" for k in item["keypoints"])

    def draw(self, img, fields: TaskFields, extras: dict) -> None:
        draw_poses(img, fields["poses"])

    def presence(self, fields: TaskFields) -> Dict[Any, tuple]:
        poses = fields.get("poses") or []
        return {PERSON: (len(poses), max(p["score"] for p in poses))} if poses else {}

    def discovery(self, labels: Optional[dict]) -> List[Entity]:
        """A person present (a pose with a keypoint above --threshold), as a binary sensor."""
        return [Entity("person", PERSON, "binary_sensor",
                       frames="{{ 'ON' if value_json.poses else 'OFF' }}",
                       state=f"{{{{ 'ON' if {jinja_literal(PERSON)} in value_json.labels else 'OFF' }}}}")]


class KeypointScorer(Scorer):
    """OKS AP and AP50 (pycocotools) of every pose, as COCO keypoint results."""

    coco_results = "keypoints"

    def __init__(self, data: EvalData) -> None:
        self.data, self.notes, self.plot = data, [], {}
        cats = data.coco["categories"]
        self.category = next((c["id"] for c in cats if "keypoints" in c), cats[0]["id"])
        self.results: List[dict] = []

    def add(self, index: int, result: Result) -> None:
        for p in result.fields["poses"]:
            at = {k["name"]: (k["x"], k["y"], k["score"]) for k in p["keypoints"]}
            flat = [v for name in KEYPOINTS for v in at.get(name, (0.0, 0.0, 0.0))]
            self.results.append({"image_id": index, "category_id": self.category,
                                 "keypoints": flat, "score": p["score"]})

    def metrics(self, done: List[int]) -> KeypointMetrics:
        return keypoint_metrics(self.data.coco, self.results, done)

    def predictions(self) -> List[dict]:
        return [dict(r, image_id=self.data.ids[r["image_id"]],
                     category_id=self.data.own_category(r["category_id"])) for r in self.results]


KIND = PoseKind()
