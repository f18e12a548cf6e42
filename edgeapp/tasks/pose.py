"""pose: 17 COCO keypoints per person in the original image's pixels ({"poses": [{"score",
"keypoints": [{"name", "x", "y", "score"}]}]}).

MoveNet single-pose ([1, 1, 17, 3]), or PoseNet's four outputs where the runtime has Coral's
PosenetDecoderOp. Images are resized with libcoral's bilinear filter, as Coral's references.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from edgeapp.core.pose import POSENET_OP, is_pose_output, movenet_pose, pose_fields, posenet_poses
from edgeapp.tasks.base import Entity, Prepared, Result, TaskKind, jinja_literal
from edgeapp.tasks.model import op_names, output_quantization

PERSON = "person"  # what pose events call a pose


class Pose(TaskKind):
    name = "pose"
    field = "poses"
    noun = "a pose estimation model"
    wanted = "a MoveNet single-pose output [1, 1, 17, 3] or a PoseNet decoder op"
    columns = ("pose", "pose_score", "keypoint", "x", "y", "score")
    defaults = {"threshold": 0.2, "resize": "stretch"}
    resample = "bilinear"
    events = "presence"
    nothing = "(no keypoint above threshold)"
    guess_rank = 0

    def claims(self, shapes, ops, input_size=None) -> bool:
        return POSENET_OP in ops or (len(shapes) == 1 and is_pose_output(shapes[0]))

    def plan(self, engine: Any, options: dict) -> tuple:
        posenet = POSENET_OP in op_names(engine)
        if not posenet and not (len(engine.outputs) == 1 and
                                is_pose_output(engine.outputs[0]["shape"])):
            raise self.refuse(engine)
        return posenet, output_quantization(engine)

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        posenet, (scale, zero) = plan
        poses = posenet_poses(outputs, prepared.fit) if posenet else \
            [movenet_pose(outputs[0], prepared.fit, scale, zero)]
        return Result({"poses": pose_fields(poses, options["threshold"])})

    def rows(self, fields: dict) -> List[dict]:
        # a keypoint's rank is its pose's; its id is its COCO keypoint index
        return [{"pose": n, "pose_score": p["score"], "keypoint": k["name"], "x": k["x"],
                 "y": k["y"], "score": k["score"]}
                for n, p in enumerate(fields["poses"], 1) for k in p["keypoints"]]

    def item_text(self, item: dict) -> str:
        return f"pose {item['score']:.2f}: " + ", ".join(
            f"{k['name']} ({k['x']:.0f}, {k['y']:.0f}) {k['score']:.2f}" for k in item["keypoints"])

    def draw(self, img, fields: dict, extras: dict) -> None:
        from edgeapp.core.overlay import draw_poses

        draw_poses(img, fields["poses"])

    def present(self, fields: dict) -> Dict[Any, tuple]:
        poses = fields.get("poses") or []
        return {PERSON: (len(poses), max(p["score"] for p in poses))} if poses else {}

    def discovery(self, labels: Optional[dict]) -> List[Entity]:
        """A person present (a pose with a keypoint above --threshold), as a binary sensor."""
        return [Entity("person", PERSON, "binary_sensor",
                       frames="{{ 'ON' if value_json.poses else 'OFF' }}",
                       state=f"{{{{ 'ON' if {jinja_literal(PERSON)} in value_json.labels else 'OFF' }}}}")]


KIND = Pose()
