"""An image's embedding: the feature vector an extractor outputs ({"embedding": [floats]}).

Not a command of its own: `retrain` runs it through the same batch pipeline as `classify`
(decoding ahead, several devices, failures as records) to learn a new last layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import numpy as np

from edgeapp.core.vision.classify import dequantize
from edgeapp.errors import InvalidModel
from edgeapp.tasks import TaskFields
from edgeapp.tasks.base import Prepared, Result, TaskKind
from edgeapp.tasks.model import output_quantization

if TYPE_CHECKING:
    from edgeapp.hw.runtime import Engine


class Embed(TaskKind):
    name = "embed"
    field = "embedding"
    noun = "an embedding extractor"
    wanted = "one feature vector"
    columns = ("embedding",)
    guess_rank = 99  # never guessed: an extractor's output looks like a classifier's
    decode = "full"  # as classify decodes: the retrained classifier sees what it was trained on

    def plan(self, engine: Engine, options: dict) -> tuple:
        if len(engine.outputs) != 1:
            raise InvalidModel(f"{engine.model_path} has {len(engine.outputs)} outputs; an embedding "
                               "extractor has one")
        return output_quantization(engine)

    def interpret(self, outputs, prepared: Prepared, plan: tuple, options: dict,
                  labels: Optional[dict]) -> Result:
        return Result({"embedding": dequantize(np.asarray(outputs[0]).ravel(), *plan)})

    def empty(self) -> TaskFields:
        return {"embedding": None}

    def items(self, fields: TaskFields) -> list:
        return []

    def rows(self, fields: TaskFields) -> List[dict]:
        vector = fields.get("embedding")
        return [{"embedding": " ".join(f"{v:.6g}" for v in vector)}] if vector is not None else []

    def summary_text(self, fields: TaskFields) -> str:
        vector = fields.get("embedding")
        return f"{len(vector)}-d embedding" if vector is not None else "(no embedding)"


KIND = Embed()


EMBED_TASK = Embed.name  # the task a sidecar records for an embedding extractor; retrain runs it
