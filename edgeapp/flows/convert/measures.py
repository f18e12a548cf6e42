"""What `convert --max-drop`'s trials are measured by. flows/convert/job.py picks one by the data
and the task there are; flows/convert/tune.py only calls it: `measure(path) -> Measured` on an
int8 file, the float side computed once.

  TaskMetric     labelled data (`--eval DATA` in any layout `eval` reads): the task's own metric
                 as `eval` computes it (flows/evaluate.evaluate: top-1, mAP50-95, mIoU, OKS AP),
                 the float original measured once, each int8 file opened as `eval` opens the
                 written model (a copy with its sidecar beside it);
  Boxes          a YOLO conversion without labels: box agreement, the int8 model's mAP50-95 with
                 the float export's boxes as the truth (flows/convert/detection.BoxAgreement);
  Agreement      else: top-1 accuracy (class folders), else top-1 agreement with the float
                 model, else the outputs' cosine (flows/convert/agreement.measure).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import numpy as np

from edgeapp.core.eval.coco import cocotools
from edgeapp.core.meta import write_sidecar
from edgeapp.core.naming import sidecar_path
from edgeapp.core.quant.tune import box_metric_of, metric_of, task_metric_of
from edgeapp.errors import ConvertError, MissingDependency, UsageError
from edgeapp.flows.convert.agreement import measure
from edgeapp.flows.convert.data import Dataset, normalize
from edgeapp.flows.evaluate import FloatVsInt8, compared, evaluate, scalar_metrics
from edgeapp.flows.open_task import Placement, open_task
from edgeapp.flows.sources.base import FloatModel
from edgeapp.flows.sources.source import BoxCheck

Say = Callable[[str], None]


class Measured(NamedTuple):
    """One int8 file measured: the metric's name, the float model's value, the int8 file's, and
    the measurement behind them (for the report)."""

    metric: str
    reference: float
    value: float
    detail: dict


class Agreement:
    """Float vs int8 on held-out images (flows/convert/agreement.measure), the float model's
    answers computed once."""

    what = "agreement with the float model"

    def __init__(self, model: FloatModel, data: Dataset, mean: float, std: float, source: str,
                 labels: Optional[np.ndarray], class_scores: bool = True) -> None:
        self.float_model = _Cached(model, model.predict(normalize(data, mean, std)))
        self.data, self.mean, self.std, self.labels = data, mean, std, labels
        self.class_scores, self.source, self.samples = class_scores, source, int(len(data.x))

    def __call__(self, path: Path) -> Measured:
        detail = measure(path, self.float_model, self.data, self.mean, self.std, self.source,
                         self.labels, self.class_scores)
        return Measured(*metric_of(detail), detail)


class _Cached:
    """The float model with its answers on the held-out images computed once."""

    def __init__(self, model: FloatModel, reference: list) -> None:
        self._reference = reference
        self.output_names, self.runtime = model.output_names, model.runtime

    def predict(self, x: np.ndarray) -> list:
        return self._reference


class Boxes:
    """Box agreement (flows/convert/detection.BoxAgreement: the float export's boxes found once)."""

    what = "box agreement (the int8 model's mAP50-95, the float model's boxes as the truth)"

    def __init__(self, agreement: BoxCheck) -> None:
        self.agreement = agreement
        self.source, self.samples = agreement.source, int(len(agreement.data.x))

    def __call__(self, path: Path) -> Measured:
        detail = self.agreement(path)
        if detail["map50_95"] is None:
            raise ConvertError(f"box agreement: {detail['note']}")
        return Measured(*box_metric_of(detail), detail)


def boxes(agreement: BoxCheck, say: Say) -> Optional[Boxes]:
    """Box agreement as the trials' measure, or None (said why) when it cannot measure: the
    float model finds no box on the held-out images, or no COCO evaluator is installed."""
    why = None if agreement.has_boxes else f"the float model finds no box on {agreement.source}"
    try:
        cocotools()
    except MissingDependency as e:
        why = str(e)
    if why:
        say(f"--max-drop: no box agreement ({why}); measuring the outputs' agreement instead")
        return None
    return Boxes(agreement)


class TaskMetric:
    """The task's metric on labelled data as `eval` computes it: the float model (`float_task`,
    a flows/open_task.OpenTask) measured once; each int8 file opened as `eval` opens it, with
    `meta` (what the written model's sidecar says: labels, preprocessing, a YOLO layout)."""

    what = "the task's metric as `eval` computes it"

    def __init__(self, float_task: Any, data: Any, meta: Any) -> None:
        self.data, self.meta = data, meta
        self.reference = evaluate(float_task, data)
        read, failed = self.reference.entry["images"], len(self.reference.errors)
        if read == 0 or 2 * failed > len(data.paths):
            first = f" (first: {self.reference.errors[0]})" if self.reference.errors else ""
            raise UsageError(f"--eval {data.source}: {failed} of {len(data.paths)} image(s) could not "
                             f"be read{first}")
        self.source, self.samples = f"--eval {data.describe()}", len(data.paths)
        self._tmp = tempfile.TemporaryDirectory(prefix="edgeapp-eval-")
        self._count = 0

    def evaluate(self, path: Path) -> Any:
        """eval's measurement (flows/evaluate.ModelEval) of the int8 file at `path`."""
        self._count += 1
        copy = Path(self._tmp.name) / f"{self._count}_{Path(path).name}"
        shutil.copyfile(path, copy)
        write_sidecar(copy, self.meta)
        try:
            with open_task(copy, None, Placement("cpu")) as opened:
                result = evaluate(opened, self.data)
        finally:
            copy.unlink()
            sidecar_path(copy).unlink()
        result.entry["model"] = str(path)
        return result

    def __call__(self, path: Path) -> Measured:
        got = self.evaluate(path)
        ref, mine = self.reference.entry["metrics"], got.entry["metrics"]
        detail = {"measured_on": self.source, "samples": self.samples, "float": scalar_metrics(ref),
                  "int8": scalar_metrics(mine), "left_out": len(got.errors)}
        return Measured(*task_metric_of(self.data.kind, ref, mine), detail)

    def report(self, path: Path) -> FloatVsInt8:
        """Float vs the int8 file at `path` as `convert --eval` reports it (flows/evaluate.compared)."""
        return compared(self.reference, self.evaluate(path), self.data)

    def close(self) -> None:
        self._tmp.cleanup()
