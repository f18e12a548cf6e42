"""What a model needs besides its graph: labels and input normalization.

`convert` writes a sidecar `X.json` beside `X.tflite`; `X_edgetpu.tflite` shares its twin's.
Models with TFLite metadata (Coral's, Model Maker's) carry a labels file in the zip appended
to the flatbuffer; that is read too, so their labels work without --labels. Ultralytics' YOLO
exports append a zip too, holding metadata.json with the class `names` (`ultralytics_metadata`).
"""

from __future__ import annotations

import ast
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Union

from typing_extensions import TypedDict

from edgeapp.core.labels import parse_labels
from edgeapp.core.naming import cpu_twin_path, sidecar_path

SIDECAR_VERSION = 1



class UltralyticsMetadata(TypedDict, total=False):
    """What an Ultralytics export says of itself (the .tflite's appended metadata.json, an ONNX
    file's metadata_props), as read: the keys edgeapp uses, their values as Ultralytics writes
    them (not checked here: metadata_names checks the names)."""
    names: Union[Dict[int, str], List[str], str]  # class id -> name (a dict literal in older files)
    task: str  # detect, segment, pose, classify, obb
    stride: int
    imgsz: List[int]
    author: str
    version: str
    end2end: bool  # NMS inside the graph (YOLO26, YOLOv10)


class Letterbox(TypedDict):
    pad_value: int
    centered: bool
    auto: bool


class YoloSidecar(TypedDict, total=False):
    """The `yolo` entry `convert` writes in a YOLO export's sidecar (flows/convert/detection.py):
    which output is which, the input size and strides, the letterbox (read by
    core/vision/yolo.sidecar_layout)."""
    layout: str  # "dfl"
    boxes: int  # the box logits' output index
    scores: int  # the class scores' output index
    classes: int
    reg_max: int
    input_size: List[int]  # width, height
    strides: List[int]
    letterbox: Letterbox
    exported_by: Optional[str]
    decode: str
    rewritten_for_edgetpu: List[str]


@dataclass
class ModelMeta:
    labels: Optional[dict[int, str]] = None
    mean: Optional[float] = None  # the float model takes (pixel − mean) / std
    std: Optional[float] = None
    decode: Optional[str] = None  # how calibration decoded JPEGs ("scaled", "full"), from a sidecar
    task: Optional[str] = None  # the edgeapp task it was made for (edgeapp/tasks), from a sidecar
    ultralytics_task: Optional[str] = None  # the task an Ultralytics export's metadata names
    source: Optional[str] = None  # where this was read from
    extra: dict = field(default_factory=dict)


def write_sidecar(model_path: str | Path, meta: ModelMeta) -> Path:
    out = sidecar_path(model_path)
    data = {"edgeapp_sidecar": SIDECAR_VERSION, "task": meta.task,
            "preprocessing": {"mean": meta.mean, "std": meta.std,
                              **({"decode": meta.decode} if meta.decode else {})},
            "labels": [meta.labels.get(i, "") for i in range(max(meta.labels) + 1)] if meta.labels else None,
            **meta.extra}
    out.write_text(json.dumps(data, indent=2) + "\n")
    return out


def read_meta(model_path: str | Path) -> ModelMeta:
    """Sidecar of the model (or of its CPU twin), else labels from embedded TFLite metadata."""
    for candidate in dict.fromkeys([sidecar_path(model_path), sidecar_path(cpu_twin_path(model_path))]):
        meta = _read_sidecar(candidate)
        if meta is not None:
            return meta
    ultra = _ultralytics_file(model_path)
    if ultra:  # a YOLO export: its class names, pixels / 255, and its task
        return ModelMeta(labels=metadata_names(ultra), mean=0.0, std=255.0,
                         ultralytics_task=ultra.get("task"),
                         source=f"{model_path} (Ultralytics metadata)")
    labels = embedded_labels(model_path)
    return ModelMeta(labels=labels, source=f"{model_path} (embedded)" if labels else None)


def _ultralytics_file(model_path: str | Path) -> UltralyticsMetadata:
    """Ultralytics' metadata appended to the file, when it is there ({} otherwise)."""
    try:  # the zip's directory is at the end: only the appended part is read, not the model
        with open(model_path, "rb") as f:
            meta = ultralytics_metadata(f)
    except OSError:
        return {}
    return meta if "names" in meta else {}


def _read_sidecar(path: Path) -> Optional[ModelMeta]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "edgeapp_sidecar" not in data:
        return None
    pre = data.get("preprocessing") or {}
    labels = data.get("labels")
    extra = {k: v for k, v in data.items() if k not in ("edgeapp_sidecar", "task", "preprocessing", "labels")}
    return ModelMeta(labels={i: str(v) for i, v in enumerate(labels)} if labels else None,
                     mean=pre.get("mean"), std=pre.get("std"),
                     decode=pre.get("decode") if pre.get("decode") in ("scaled", "full") else None,
                     task=data.get("task"),
                     source=str(path), extra=extra)


def embedded_labels(model_path: str | Path) -> Optional[dict[int, str]]:
    """Labels from the associated-files zip that TFLite metadata appends to the model."""
    try:
        with open(model_path, "rb") as f, zipfile.ZipFile(f) as z:
            names = [n for n in z.namelist() if n.lower().endswith(".txt")]
            if not names:
                return None
            text = z.read(sorted(names, key=lambda n: ("label" not in n.lower(), n))[0])
    except (OSError, zipfile.BadZipFile, KeyError, ValueError):
        return None
    return parse_labels(io.TextIOWrapper(io.BytesIO(text), encoding="utf-8", errors="replace").read()) or None


def ultralytics_metadata(data) -> UltralyticsMetadata:
    """What Ultralytics appended to a .tflite (the file's bytes, or the open file): a zip holding
    metadata.json (8.3+), or older, a text file with a Python dict literal. {} when there is
    none or it cannot be read."""
    try:
        with zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data) as z:
            names = z.namelist()
            if "metadata.json" in names:
                meta = json.loads(z.read("metadata.json").decode("utf-8"))
            else:
                text = next((z.read(n).decode("utf-8") for n in names if n.endswith(".txt")), "")
                meta = ast.literal_eval(text) if text.lstrip().startswith("{") else {}
    except (zipfile.BadZipFile, KeyError, ValueError, SyntaxError, UnicodeDecodeError,
            RecursionError, MemoryError):
        return {}
    return meta if isinstance(meta, dict) else {}


def metadata_names(meta: UltralyticsMetadata) -> Optional[dict[int, str]]:
    """Class names {id: name} from Ultralytics metadata (keys may be strings, or a list)."""
    names = meta.get("names")
    if isinstance(names, str):
        try:
            names = ast.literal_eval(names)
        except (ValueError, SyntaxError):
            return None
    if isinstance(names, list):
        names = dict(enumerate(names))
    if not isinstance(names, dict):
        return None
    try:
        return {int(k): str(v) for k, v in names.items()} or None
    except (TypeError, ValueError):
        return None
