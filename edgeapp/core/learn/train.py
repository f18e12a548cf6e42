"""Teaching a classifier head new classes from embeddings, in numpy (no TensorFlow on a Dev Board).

Both methods work on L2-normalized embeddings, which is also what the written model feeds its
last layer (an L2_NORMALIZATION op sits between the extractor and the fully-connected layer):

- weight imprinting (Qi et al., "Low-Shot Learning with Imprinted Weights", 2018): a class's
  weights are the normalized mean of its normalized embeddings, so a logit is `scale` times the
  cosine between the image and the class. Like Coral's imprinting engine, a fixed scale turns
  cosines in [-1, 1] into logits sharp enough for a softmax; here it is folded into the weights.
- softmax regression: a linear layer trained by mini-batch SGD on the cross-entropy, with L2
  regularization of the weights (not the bias), an inverse-time decay of the learning rate
  (lr / (1 + epoch / decay_epochs): a constant rate leaves SGD wandering around the optimum), a
  fixed seed for the batch order, and early stopping on the validation loss (the best epoch's
  weights are kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from edgeapp.errors import UsageError

# Logits = IMPRINT_SCALE x cosine. 16 makes a cosine margin of 0.1 between two classes a 5:1
# odds ratio (e^1.6): confident on distinct classes, not saturated (NormFace uses 10 to 30).
IMPRINT_SCALE = 16.0
# Products are taken _ROWS rows at a time: BLAS runs larger ones on several threads, and on a
# busy 2-core machine each such call then waited ~8 ms for its threads, where 32-row pieces on
# one thread took 0.1 ms for 200 x 1024 by 1024 x 10 (measured with OpenBLAS).
_ROWS = 32


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero), as TFLite's L2_NORMALIZATION does."""
    x = np.asarray(x, dtype=np.float64)
    norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    return x / np.maximum(norm, eps)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def dense(x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Logits of a fully-connected layer: weights [classes, depth] as TFLite stores them."""
    x = np.asarray(x, dtype=np.float64)
    w = np.ascontiguousarray(np.asarray(weights, dtype=np.float64).T)
    out = np.empty((x.shape[0], w.shape[1]))
    for start in range(0, len(x), _ROWS):
        np.matmul(x[start:start + _ROWS], w, out=out[start:start + _ROWS])
    return out + bias


def head_scores(embeddings: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """What the appended head computes, in float: normalize, fully-connected, softmax."""
    return softmax(dense(l2_normalize(embeddings), weights, bias))


def _check(labels: np.ndarray, classes: int) -> np.ndarray:
    labels = np.asarray(labels, dtype=np.int64)
    counts = np.bincount(labels, minlength=classes)
    if len(counts) > classes or (labels < 0).any():
        raise UsageError(f"labels must be class indices below {classes}")
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise UsageError(f"class {int(empty[0])} has no embedding to learn from")
    return labels


def imprint(embeddings: np.ndarray, labels: np.ndarray, classes: int,
            scale: float = IMPRINT_SCALE) -> tuple[np.ndarray, np.ndarray]:
    """(weights [classes, depth], bias [classes]) by weight imprinting; the bias is zero."""
    labels = _check(labels, classes)
    order = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[order], np.arange(classes))
    sums = np.add.reduceat(l2_normalize(embeddings)[order], starts, axis=0)
    return scale * l2_normalize(sums), np.zeros(classes)


@dataclass(frozen=True)
class SgdOptions:
    """Softmax regression's knobs. The defaults suit unit-length embeddings of any size."""

    epochs: int = 300
    lr: float = 2.0
    l2: float = 1e-4
    batch_size: int = 32
    seed: int = 0
    decay_epochs: float = 20.0  # the learning rate is halved after this many epochs
    patience: int = 30  # epochs without a better validation loss before stopping


@dataclass
class HeadFit:
    weights: np.ndarray  # [classes, depth]
    bias: np.ndarray  # [classes]
    epochs: int  # epochs run
    best_epoch: int  # the epoch whose weights were kept (the last one without validation)
    val_loss: list = field(default_factory=list)  # per epoch, when there is a validation set


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    z = logits - logits.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(labels)), labels].mean())


def objective(x: np.ndarray, labels: np.ndarray, weights: np.ndarray, bias: np.ndarray,
              l2: float) -> float:
    """The loss softmax regression minimizes: mean cross-entropy + l2/2 |W|^2 (x as given)."""
    return cross_entropy(dense(x, weights, bias), labels) + 0.5 * l2 * float(np.sum(weights ** 2))


def train_softmax(embeddings: np.ndarray, labels: np.ndarray, classes: int,
                  val_embeddings: Optional[np.ndarray] = None,
                  val_labels: Optional[np.ndarray] = None,
                  options: SgdOptions = SgdOptions(), normalize: bool = True) -> HeadFit:
    """Softmax regression by mini-batch SGD from zero weights (the loss is convex, so no random
    start is needed; the seed only orders the batches). `normalize=False` trains on the rows as
    given (tests compare with reference solvers so)."""
    labels = _check(labels, classes)
    # float32 on unit-length embeddings (about 40 % faster, far finer than the int8 weights
    # written); float64 on rows as given, for exact comparisons
    kind = np.float32 if normalize else np.float64
    x = (l2_normalize(embeddings) if normalize else np.asarray(embeddings)).astype(kind)
    n, depth = x.shape
    has_val = val_embeddings is not None and val_labels is not None and len(val_labels) > 0
    if has_val:
        xv = (l2_normalize(val_embeddings) if normalize else np.asarray(val_embeddings)).astype(kind)
        yv = np.asarray(val_labels, dtype=np.int64)
    w, b = np.zeros((classes, depth), kind), np.zeros(classes, kind)
    best = (np.inf, w.copy(), b.copy(), 0)
    rng = np.random.RandomState(options.seed)  # not default_rng: numpy 1.16 (Dev Board) lacks it
    batch = max(1, min(options.batch_size, n))
    fit = HeadFit(w, b, 0, 0)
    for epoch in range(1, options.epochs + 1):
        order = rng.permutation(n)
        xs, ys = x[order], labels[order]  # one copy per epoch; the batches are views of it
        lr = options.lr / (1.0 + (epoch - 1) / options.decay_epochs)
        for start in range(0, n, batch):
            _sgd_step(xs[start:start + batch], ys[start:start + batch], w, b, lr, options.l2)
        fit.epochs = epoch
        if not has_val:
            continue
        loss = cross_entropy(dense(xv, w, b), yv)
        fit.val_loss.append(loss)
        if loss < best[0] - 1e-9:
            best = (loss, w.copy(), b.copy(), epoch)
        elif epoch - best[3] >= options.patience:
            break
    if has_val:
        w, b, fit.best_epoch = best[1], best[2], best[3]
    else:
        fit.best_epoch = fit.epochs
    fit.weights, fit.bias = w.astype(np.float64), b.astype(np.float64)
    return fit


def _sgd_step(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: np.ndarray, lr: float,
              l2: float) -> None:
    """One gradient step on a batch, in place."""
    z = x @ w.T
    z += b
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    z[np.arange(len(y)), y] -= 1.0
    z *= lr / len(y)
    b -= z.sum(axis=0)
    w *= 1.0 - lr * l2
    w -= z.T @ x
