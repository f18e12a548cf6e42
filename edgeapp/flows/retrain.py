"""`retrain` as a use case: a folder of photos, one sub-folder per class, and an embedding
extractor in; one .tflite classifier (and its sidecar) out, without TensorFlow.

1. the images' embeddings, through the same batch pipeline as `classify` (decoding ahead on
   every core, the extractor on the Edge TPU or the CPU, bad images reported and skipped),
   except those already in the embedding cache;
2. a content-hash stratified split, a head trained on the training part (core/learn/train.py) and
   scored on the held-out part;
3. the head written after the extractor (core/learn/head.py, core/tflite/append.py): for a compiled
   extractor, X_edgetpu.tflite and, when the extractor's CPU twin is there, X.tflite beside it
   (the retrained twin, which the CPU fallback runs), plus the sidecar X.json (labels: the
   class folder names; the extractor's preprocessing).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional

import numpy as np
from typing_extensions import TypedDict

from edgeapp.core.learn.embedding import require_extractor
from edgeapp.core.learn.head import head_tensors, logit_range
from edgeapp.core.learn.holdout import confusion_matrix, overall_accuracy, per_class_accuracy, stratified_split
from edgeapp.core.learn.train import SgdOptions, head_scores, imprint, train_softmax
from edgeapp.core.meta import ModelMeta, read_meta, write_sidecar
from edgeapp.core.naming import EDGETPU_SUFFIX, cpu_twin_path, edgetpu_twin_path, sidecar_path
from edgeapp.core.registry import file_sha256
from edgeapp.core.tflite.append import append_operators
from edgeapp.core.tflite.model import TfliteModel, load_model, parse_model
from edgeapp.errors import InvalidModel, UsageError
from edgeapp.flows.batch import iter_records
from edgeapp.flows.embedding_cache import EmbeddingCache, content_keys
from edgeapp.flows.inputs import IMAGE_SUFFIXES
from edgeapp.hw.worker import events as engine_events
from edgeapp.hw.worker.events import OutageCounts, Tally
from edgeapp.tasks import noun_for
from edgeapp.tasks.base import bind
from edgeapp.tasks.classify import KIND as CLASSIFY
from edgeapp.tasks.internal.embed import EMBED_TASK
from edgeapp.tasks.model import image_model

if TYPE_CHECKING:
    from edgeapp.execution.runner import Runner
    from edgeapp.tasks.base import BoundTask

METHODS = ("imprint", "softmax")
Notice = Callable[[str], None]


@dataclass(frozen=True)
class RetrainOptions:
    method: str = "imprint"
    val: float = 0.2  # the share of each class held out to score the head
    sgd: SgdOptions = SgdOptions()


@dataclass
class ClassFolders:
    names: list[str]
    paths: list[str]
    labels: list[int]


@dataclass
class Extraction:
    vectors: dict = field(default_factory=dict)  # path -> embedding (float32)
    keys: dict = field(default_factory=dict)  # path -> SHA-256 of the image file
    failed: list = field(default_factory=list)  # (path, error)
    extracted: int = 0
    cached: int = 0
    normalization: tuple = (None, None, None)  # (mean, std, JPEG decode) the images were prepared with
    seconds: float = 0.0


def class_folders(data_dir: str | Path) -> ClassFolders:
    """One class per sub-folder (sorted by name, as `convert --calibration` reads them), its
    images found recursively; fewer than two classes, or a class without images, is refused."""
    root = Path(data_dir)
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder: retrain takes a folder with one sub-folder of "
                         "photos per class")
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if len(names) < 2:
        found = f"only {names[0]!r}" if names else "none"
        raise UsageError(f"{root} needs at least 2 class sub-folders (one per class), found {found}")
    paths: list[str] = []
    labels: list[int] = []
    for i, name in enumerate(names):
        mine = [str(p) for p in sorted((root / name).rglob("*")) if _is_image(p, root / name)]
        if not mine:
            raise UsageError(f"class {name!r} ({root / name}) has no images "
                             f"({', '.join(sorted(IMAGE_SUFFIXES)[:5])}, ...)")
        paths += mine
        labels += [i] * len(mine)
    return ClassFolders(names, paths, labels)


def _is_image(p: Path, top: Path) -> bool:
    hidden = any(part.startswith(".") for part in p.relative_to(top).parts)
    return not hidden and p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()


def embed_through_batch(runner: Runner, task: BoundTask, paths: list[str], workers: int,
                        progress: Optional[Callable[[], None]] = None
                        ) -> tuple[tuple, Iterator[tuple[str, Any, Any, str]]]:
    """THE adapter to the inference pipeline `classify` runs (flows/batch.py): the extractor's
    input spec and preprocessing from its metadata, images prepared ahead on `workers` threads,
    the runner's devices, failures as records. Returns the (mean, std, decode) the images are prepared
    with, and (path, embedding or None, error or None, model file that ran) per path, in order.
    `task`: the extractor's task on the runner's model (`embedding_task`)."""

    def records() -> Iterator[tuple[str, Any, Any, str]]:
        for r in iter_records(paths, runner, task, workers):
            if progress:
                progress()
            yield r["path"], r["embedding"], r["error"], r["model"]

    return (task.spec.mean, task.spec.std, task.spec.decode), records()


def embedding_task(runner: Runner) -> Any:
    """The `embed` task bound to the runner's model: its input spec and preprocessing from the
    model's metadata (and sidecar)."""
    return bind(EMBED_TASK, image_model(runner.engine, runner.meta_path))


def preparation_tag(mean: float, std: float, decode: Optional[str]) -> str:
    """A short, file-name-safe tag of how images are prepared: an embedding depends on it as
    much as on the model's bytes (a sidecar's normalization or decode can change alone)."""
    import hashlib

    return hashlib.sha256(f"{mean}|{std}|{decode}".encode()).hexdigest()[:12]


def extract(runner: Runner, paths: list[str], workers: int, cache: Optional[EmbeddingCache],
            progress: Optional[Callable[[], None]] = None) -> Extraction:
    """Every image's embedding: from the cache when this model computed it before, else through
    the pipeline (then cached). Images that fail are listed, not fatal."""
    start = time.perf_counter()
    out = Extraction()
    keys = content_keys(paths, max(1, workers))
    out.keys = {p: k for p, k in zip(paths, keys) if k}
    model_keys: dict = {}
    task = embedding_task(runner)
    tag = preparation_tag(task.spec.mean, task.spec.std, task.spec.decode)

    def model_key(path: str) -> str:
        """The model's bytes and how images are prepared for it: one cache folder."""
        if path not in model_keys:
            model_keys[path] = f"{file_sha256(path)}-{tag}"
        return model_keys[path]

    todo = []
    running = model_key(runner.engine.model_path)
    for p, k in zip(paths, keys):
        hit = cache.get(running, k) if cache is not None and k else None
        if hit is None:
            todo.append(p)
        else:
            out.vectors[p] = hit
            out.cached += 1
            if progress:
                progress()
    out.normalization, records = embed_through_batch(runner, task, todo, workers, progress)
    for path, vector, error, model in records:
        if error is not None:
            out.failed.append((path, error))
            continue
        out.vectors[path] = vector
        out.extracted += 1
        if cache is not None and path in out.keys:
            cache.put(model_key(model), out.keys[path], vector)
    out.seconds = time.perf_counter() - start
    return out


def output_plan(requested: TfliteModel, out: Path, cpu_model: Optional[Path] = None
                ) -> list[tuple[Path, Path]]:
    """(base, file to write) pairs. A compiled base: X_edgetpu.tflite, and X.tflite from its CPU
    twin when that is there (the fallback runs it); a CPU base: `out` as given."""
    out = Path(out)
    base = Path(requested.path)
    if requested.is_edgetpu_compiled:
        cpu_out = cpu_twin_path(out)
        plan = [(base, edgetpu_twin_path(cpu_out))]
        twin = Path(cpu_model) if cpu_model else cpu_twin_path(base)
        if twin.is_file() and twin.resolve() != base.resolve():
            plan.append((twin, cpu_out))
    else:
        if out.stem.endswith(EDGETPU_SUFFIX):
            raise UsageError(f"-o {out}: the base {base.name} is not compiled for the Edge TPU, so "
                             f"the result is a CPU model: name it {cpu_twin_path(out).name}")
        plan = [(base, out)]
    for b, o in plan:
        if o.exists() and o.resolve() == b.resolve():
            raise UsageError(f"-o {out} would overwrite the base model {b}")
    return plan


class ImageCounts(TypedDict):
    total: int
    used: int
    train: int
    val: int
    skipped: int
    extracted: int  # embeddings computed in this run
    cached: int  # embeddings read from the cache


# `class` is a keyword: the functional form names that key
PerClass = TypedDict("PerClass", {"class": str, "images": int, "train": int, "val": int,
                                  "val_accuracy": Optional[float]})


class Training(TypedDict):
    epochs: Optional[int]  # softmax regression: epochs run and the epoch kept
    best_epoch: Optional[int]


class Skipped(TypedDict):
    path: str
    error: str


class RetrainReport(TypedDict):
    """`retrain --format json`: where the models went, per class and overall validation accuracy
    of the trained head (None without validation images), the confusion matrix, the time taken."""
    model: str
    models: List[str]
    sidecar: str
    device: str
    method: str
    classes: List[str]
    images: ImageCounts
    per_class: List[PerClass]
    val_accuracy: Optional[float]
    confusion: Optional[List[List[int]]]
    training: Training
    skipped: List[Skipped]
    seconds: Dict[str, float]  # extract, train


class RetrainDoc(RetrainReport, total=False):
    """What `retrain` returns: the report, with `engine` when the extractor's engine was lost and
    recovered while it extracted (a worker, docs/recovery.md)."""
    engine: OutageCounts


def retrain(runner: Runner, data_dir: str | Path, out: str | Path,
            options: RetrainOptions = RetrainOptions(), *, workers: int = 2,
            cache: Optional[EmbeddingCache] = None, progress: Optional[Callable[[], None]] = None,
            on_notice: Optional[Notice] = None, cpu_model: Optional[Path] = None,
            base_name: Optional[str] = None) -> RetrainDoc:
    """Extract, train, score, write; the report (see `report`). `runner` runs the extractor
    (flows/open_task, as `classify` opens its model); an engine lost and recovered meanwhile is
    counted in `engine` and said."""
    if options.method not in METHODS:
        raise UsageError(f"unknown method {options.method!r}; choose one of: {', '.join(METHODS)}")
    say = on_notice or (lambda _text: None)
    folders = class_folders(data_dir)
    requested = load_model(runner.engine.requested_model or runner.engine.model_path)
    plan = output_plan(requested, Path(out), cpu_model)
    labels = read_meta(runner.meta_path).labels
    depths = {require_extractor(m, len(labels) if labels else None, noun_for)
              for m in [runner.engine.model] + [load_model(b) for b, _ in plan]}
    if len(depths) != 1:
        raise InvalidModel(f"{requested.path} and its CPU twin give embeddings of different sizes "
                           f"({', '.join(str(d) for d in sorted(depths))}); pass the right --cpu-model")
    tally = Tally()
    with engine_events.listening(tally, say):
        ex = extract(runner, folders.paths, workers, cache, progress)
    if tally.events:
        say(f"{tally.line()} while extracting")
    for path, error in ex.failed:
        say(f"skipping {error if str(path) in str(error) else f'{path}: {error}'}")
    if cache is not None and cache.broken:
        say(f"warning: {cache.broken}")
    kept = [i for i, p in enumerate(folders.paths) if p in ex.vectors]
    y = np.array([folders.labels[i] for i in kept], dtype=np.int64)
    counts = np.bincount(y, minlength=len(folders.names))
    for c in np.flatnonzero(counts == 0):
        raise UsageError(f"class {folders.names[c]!r} has no image the base can read "
                         f"({folders.labels.count(int(c))} skipped)")
    x = np.stack([ex.vectors[folders.paths[i]] for i in kept])
    keys = [ex.keys.get(folders.paths[i], folders.paths[i]) for i in kept]
    train, val = stratified_split(keys, y, options.val)
    started = time.perf_counter()
    head = _train(x, y, train, val, len(folders.names), options)
    trained = time.perf_counter() - started
    written = [_write(base, target, head) for base, target in plan]
    mean, std, decode = ex.normalization
    sidecar = _write_sidecar(cpu_twin_path(plan[0][1]), folders.names, (mean, std, decode), {
        "base": base_name or str(requested.path), "method": options.method,
        "images": len(kept), "embedding": depths.pop()})
    doc = retrain_report(folders, y, train, val, head, ex, options, written, sidecar,
                         {"extract": ex.seconds, "train": trained}, runner.label)
    if tally.events:
        doc["engine"] = tally.summary()
    return doc


@dataclass
class Head:
    weights: np.ndarray
    bias: np.ndarray
    logits: tuple  # the (low, high) range the logits are quantized over
    val_predicted: np.ndarray  # the head's classes for the validation images
    epochs: Optional[int] = None  # softmax regression: epochs run and the epoch kept
    best_epoch: Optional[int] = None


def _train(x: np.ndarray, y: np.ndarray, train: list, val: list, classes: int,
           options: RetrainOptions) -> Head:
    """Fit on the training split, predict the validation split. The head written is that one,
    except for imprinting, which has nothing to tune on the held-out images: its final weights
    are imprinted from every image."""
    if options.method == "imprint":
        w, b = imprint(x[train], y[train], classes)
        predicted = head_scores(x[val], w, b).argmax(axis=1) if val else np.zeros(0, np.int64)
        w, b = imprint(x, y, classes)
        return Head(w, b, logit_range(x, w, b), predicted)
    fit = train_softmax(x[train], y[train], classes, x[val] if val else None,
                        y[val] if val else None, options.sgd)
    predicted = head_scores(x[val], fit.weights, fit.bias).argmax(axis=1) if val else \
        np.zeros(0, np.int64)
    return Head(fit.weights, fit.bias, logit_range(x[train], fit.weights, fit.bias), predicted,
                fit.epochs, fit.best_epoch)


def _write(base: Path, target: Path, head: Head) -> str:
    data = Path(base).read_bytes()
    model = parse_model(data, str(base))
    tensors, ops, output = head_tensors(model, head.weights, head.bias, head.logits)
    blob = append_operators(data, tensors, ops, [output], str(base))
    parse_model(blob, str(target))  # what we wrote reads back
    _write_atomic(target, blob)
    return str(target)


def _write_atomic(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.part")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except OSError as e:
        if tmp.exists():
            tmp.unlink()
        raise UsageError(f"cannot write {target}: {e.strerror or e}") from None


def _write_sidecar(model_path: Path, names: list, normalization: tuple, info: dict) -> str:
    """The retrained model's sidecar: its classes, and the extractor's preprocessing (the new
    head learnt from images prepared so: classify prepares them the same way)."""
    mean, std, decode = normalization
    meta = ModelMeta(labels=dict(enumerate(names)), mean=mean, std=std, decode=decode, task=CLASSIFY.name,
                     extra={"retrain": info})
    try:
        return str(write_sidecar(model_path, meta))
    except OSError as e:
        raise UsageError(f"cannot write {sidecar_path(model_path)}: {e.strerror or e}") from None


def retrain_report(folders: ClassFolders, y: np.ndarray, train: list, val: list, head: Head,
           ex: Extraction, options: RetrainOptions, written: list, sidecar: str,
           seconds: dict, device: str) -> RetrainDoc:
    """What `retrain --format json` prints: per class and overall validation accuracy of the
    trained head (float, on the embeddings), the confusion matrix, where the files went."""
    k = len(folders.names)
    cm = confusion_matrix(y[val], head.val_predicted, k) if val else None
    per = per_class_accuracy(cm) if cm is not None else [None] * k
    n_train, n_val = np.bincount(y[train], minlength=k), np.bincount(y[val], minlength=k)
    return {
        "model": written[0], "models": written, "sidecar": sidecar, "device": device,
        "method": options.method, "classes": list(folders.names),
        "images": {"total": len(folders.paths), "used": int(len(y)), "train": len(train),
                   "val": len(val), "skipped": len(ex.failed), "extracted": ex.extracted,
                   "cached": ex.cached},
        "per_class": [{"class": name, "images": int(n_train[i] + n_val[i]), "train": int(n_train[i]),
                       "val": int(n_val[i]), "val_accuracy": per[i]}
                      for i, name in enumerate(folders.names)],
        "val_accuracy": overall_accuracy(cm) if cm is not None else None,
        "confusion": cm.tolist() if cm is not None else None,
        "training": {"epochs": head.epochs, "best_epoch": head.best_epoch},
        "skipped": [{"path": p, "error": e} for p, e in ex.failed],
        "seconds": {key: round(v, 3) for key, v in seconds.items()},
    }
