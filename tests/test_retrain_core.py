"""The pure maths of `retrain`: imprinting, softmax regression (against scikit-learn), the
content-hash split and the scores, on fixed synthetic embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from edgeapp.core.learn.holdout import confusion_matrix, overall_accuracy, per_class_accuracy, stratified_split
from edgeapp.core.learn.train import (
    IMPRINT_SCALE,
    SgdOptions,
    dense,
    head_scores,
    imprint,
    l2_normalize,
    objective,
    softmax,
    train_softmax,
)
from edgeapp.errors import UsageError


def blobs(classes: int, per_class: int, depth: int, spread: float, seed: int):
    """Embeddings around one random centre per class (non-negative, like ReLU features)."""
    rng = np.random.default_rng(seed)
    centres = rng.random((classes, depth)) * 2
    y = np.repeat(np.arange(classes), per_class)
    x = np.abs(centres[y] + rng.normal(scale=spread, size=(len(y), depth)))
    return x, y


def test_l2_normalize_and_softmax():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    assert np.allclose(l2_normalize(x), [[0.6, 0.8], [0.0, 0.0]])
    p = softmax(np.array([[1000.0, 1000.0 + np.log(3.0)]]))  # large logits: no overflow
    assert np.allclose(p, [[0.25, 0.75]])


def test_imprinting_is_the_scaled_normalized_mean_of_normalized_embeddings():
    x = np.array([[1.0, 0.0], [0.0, 2.0], [5.0, 5.0], [0.0, 1.0]])
    y = np.array([0, 0, 1, 1])
    w, b = imprint(x, y, 2)
    # class 0: mean of (1,0) and (0,1) -> (1,1)/sqrt2; the norm of the raw embedding (2) is gone
    assert np.allclose(w[0], IMPRINT_SCALE * np.array([1, 1]) / np.sqrt(2))
    c1 = np.array([1 / np.sqrt(2), 1 / np.sqrt(2) + 1])
    assert np.allclose(w[1], IMPRINT_SCALE * c1 / np.linalg.norm(c1))
    assert np.all(b == 0)
    # logits are IMPRINT_SCALE x cosine
    q = np.array([[2.0, 0.0]])
    cosines = np.array([[1 / np.sqrt(2), c1[0] / np.linalg.norm(c1)]])
    assert np.allclose(dense(l2_normalize(q), w, b), IMPRINT_SCALE * cosines)


def test_imprinting_refuses_an_empty_class():
    with pytest.raises(UsageError, match="class 2 has no embedding"):
        imprint(np.ones((2, 3)), np.array([0, 1]), 3)


def test_imprinting_separates_blobs():
    x, y = blobs(5, 20, 32, 0.3, seed=1)
    xt, yt = blobs(5, 20, 32, 0.3, seed=1)[0][::2], y[::2]
    w, b = imprint(x[1::2], y[1::2], 5)
    assert (head_scores(xt, w, b).argmax(axis=1) == yt).all()


def test_full_batch_softmax_regression_matches_scikit_learn():
    """Full-batch gradient descent converges to the same unique optimum as scikit-learn's
    multinomial LogisticRegression with the matching L2 (C = 1 / (l2 x n); neither
    penalizes the intercept)."""
    sklearn = pytest.importorskip("sklearn.linear_model")
    x, y = blobs(3, 40, 8, 1.5, seed=0)
    l2 = 0.05
    fit = train_softmax(x, y, 3, options=SgdOptions(epochs=20000, lr=0.05, l2=l2, batch_size=len(y),
                                                    decay_epochs=1e9), normalize=False)
    ref = sklearn.LogisticRegression(C=1 / (l2 * len(y)), tol=1e-12, max_iter=10000).fit(x, y)
    assert np.abs(fit.weights - ref.coef_).max() < 1e-5 * max(1.0, np.abs(ref.coef_).max())
    # the intercepts are defined up to a common constant: compare them centred
    centred = fit.bias - fit.bias.mean()
    assert np.allclose(centred, ref.intercept_ - ref.intercept_.mean(), atol=1e-5)
    assert objective(x, y, fit.weights, fit.bias, l2) == pytest.approx(
        objective(x, y, ref.coef_, ref.intercept_, l2), abs=1e-9)


def test_minibatch_sgd_reaches_scikit_learns_optimum_on_normalized_embeddings():
    """The defaults (mini-batches of 32, decaying rate) on the unit-length embeddings the head
    sees: the objective within 1e-3 of the optimum, the same predictions on held-out data."""
    sklearn = pytest.importorskip("sklearn.linear_model")
    x, y = blobs(10, 100, 64, 0.8, seed=3)  # 1,000 embeddings x 10 classes
    xv, yv = blobs(10, 30, 64, 0.8, seed=3)[0], np.repeat(np.arange(10), 30)
    opts = SgdOptions(l2=1e-3)
    fit = train_softmax(x, y, 10, options=opts)  # no validation: all epochs
    assert fit.epochs == opts.epochs and fit.best_epoch == opts.epochs
    xn = l2_normalize(x)
    ref = sklearn.LogisticRegression(C=1 / (opts.l2 * len(y)), tol=1e-10, max_iter=10000).fit(xn, y)
    ours = objective(xn, y, fit.weights, fit.bias, opts.l2)
    best = objective(xn, y, ref.coef_, ref.intercept_, opts.l2)
    assert best - 1e-9 <= ours < best + 1e-3
    mine = head_scores(xv, fit.weights, fit.bias).argmax(axis=1)
    theirs = ref.predict(l2_normalize(xv))
    assert (mine == theirs).mean() >= 0.99
    assert (mine == yv).mean() == pytest.approx((theirs == yv).mean(), abs=0.01)


def test_softmax_regression_is_deterministic_and_seeded():
    x, y = blobs(4, 25, 16, 1.0, seed=5)
    a = train_softmax(x, y, 4, options=SgdOptions(epochs=20, seed=7))
    b = train_softmax(x, y, 4, options=SgdOptions(epochs=20, seed=7))
    c = train_softmax(x, y, 4, options=SgdOptions(epochs=20, seed=8))
    assert np.array_equal(a.weights, b.weights) and np.array_equal(a.bias, b.bias)
    assert not np.array_equal(a.weights, c.weights)


def test_early_stopping_keeps_the_best_validation_epoch():
    """Noisy labels and no regularization: the validation loss turns up; training stops
    `patience` epochs after its minimum and keeps that epoch's weights."""
    rng = np.random.default_rng(2)
    x, y = blobs(3, 30, 40, 2.0, seed=2)
    y = np.where(rng.random(len(y)) < 0.3, rng.integers(0, 3, len(y)), y)
    xv, yv = blobs(3, 30, 40, 2.0, seed=9)
    opts = SgdOptions(epochs=500, lr=2.0, l2=0.0, patience=15, decay_epochs=1e9)
    fit = train_softmax(x, y, 3, xv, yv, opts)
    assert fit.epochs < opts.epochs and fit.epochs == fit.best_epoch + opts.patience
    assert min(fit.val_loss) == fit.val_loss[fit.best_epoch - 1]
    from edgeapp.core.learn.train import cross_entropy
    assert cross_entropy(dense(l2_normalize(xv), fit.weights, fit.bias), yv) == \
        pytest.approx(fit.val_loss[fit.best_epoch - 1])


def test_stratified_split_is_decided_by_content_hash():
    keys = [f"{h:02x}" for h in (9, 3, 7, 1, 5, 2, 8, 4, 6, 0)]
    labels = [0] * 5 + [1] * 5
    train, val = stratified_split(keys, labels, 0.4)
    # class 0 (keys 09 03 07 01 05): the two smallest keys, 01 and 03; class 1: 00 and 02
    assert val == [1, 3, 5, 9] and train == [0, 2, 4, 6, 7, 8]
    # the order of the inputs does not matter, only their keys
    perm = [3, 0, 4, 1, 2, 9, 6, 5, 8, 7]
    t2, v2 = stratified_split([keys[i] for i in perm], [labels[i] for i in perm], 0.4)
    assert sorted(keys[perm[i]] for i in v2) == sorted(keys[i] for i in val)
    # half of class 0 (key "a") is held out, the single image of class 1 is kept for training
    assert stratified_split(["a", "b", "c"], [0, 0, 1], 0.5) == ([1, 2], [0])
    assert stratified_split(keys, labels, 0.0) == (list(range(10)), [])
    with pytest.raises(ValueError):
        stratified_split(keys, labels, 1.0)


def test_confusion_matrix_and_accuracies():
    cm = confusion_matrix([0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 0, 2], 4)
    assert cm.tolist() == [[1, 1, 0, 0], [1, 2, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    assert per_class_accuracy(cm) == [0.5, pytest.approx(2 / 3), 1.0, None]
    assert overall_accuracy(cm) == pytest.approx(4 / 6)
    assert overall_accuracy(confusion_matrix([], [], 2)) is None
