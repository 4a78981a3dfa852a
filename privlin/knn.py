"""Nearest neighbours on feature stores (faiss): a non-private accuracy reference and an overlap audit.

Why here: two questions come before any private fit.

* *How good are these features at all?*  The k-NN accuracy of the test split against the training split is a
  cheap, tuning-free reference line for a privacy–accuracy curve.  It reads private labels without noise:
  it is **not private** and must never be published as a private result (the result says ``private=False``).
* *Did the "public" pretraining data contain the private data?*  A private model trained on features of a
  backbone that saw the private images leaks more than its ε says.  :func:`overlap_audit` finds, for every
  private row, its most similar public row by cosine similarity and counts the private rows with a public
  twin above a threshold (near-duplicates, the deduplication Mehta et al. ran on ImageNet-21k).

Both stream the query side in blocks; the reference side (the training split, the public store) is held in
a faiss index in memory as float32.  Cosine similarity is the inner product of L2-normalized rows.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import faiss
import numpy as np
from dp_accounting import dp_event as _ev

from . import data, evaluation
from .report import PrivacyLeakWarning

__all__ = ["knn_accuracy", "KnnResult", "overlap_audit", "OverlapReport"]

_BLOCK = 16384


def _blocks(source: data.Source):
    """``(X float32 C-contiguous (b, D), y (b,))`` blocks of a source."""
    for X, y in source.blocks(_BLOCK):
        yield np.ascontiguousarray(X, dtype=np.float32), y


def _normalized(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), float32, C-contiguous."""
    X = np.array(X, dtype=np.float32, copy=True, order="C")
    if not np.isfinite(X).all():
        raise ValueError("features contain NaN or inf")
    faiss.normalize_L2(X)
    return X


def _index(source: data.Source, normalize: bool) -> tuple[faiss.Index, np.ndarray]:
    """A flat inner-product index of every row of ``source`` and its labels (n,)."""
    index = faiss.IndexFlatIP(source.dim)
    labels = []
    for X, y in _blocks(source):
        index.add(_normalized(X) if normalize else X)
        labels.append(np.asarray(y))
    if index.ntotal == 0:
        raise ValueError("the reference side has no rows")
    return index, np.concatenate(labels)


@dataclass(frozen=True)
class KnnResult:
    """k-NN accuracy of a query set against a labelled reference set (non-private).

    Attributes
    ----------
    accuracy : float
        Fraction of query rows whose (similarity-weighted) k-NN vote is their label.
    k : int
    n_train, n_test : int
    private : bool
        Always False: the vote reads private labels without noise.
    public_test : bool
        The test rows were declared public (not charged).
    test_charge : str
        What the test split paid (:func:`privlin.evaluation.charge_exact`).
    """

    accuracy: float
    k: int
    n_train: int
    n_test: int
    private: bool = False
    public_test: bool = False
    test_charge: str = ""


def knn_accuracy(train, test, *, k: int = 10, weighted: bool = True, cosine: bool = True, budget=None,
                 ledger=None, public_test: bool = False, test_ledger=None) -> KnnResult:
    """k-NN classification accuracy of ``test`` against ``train``: a non-private reference.

    It releases a number computed without noise from both splits' rows, so both pay before any row is read
    (:mod:`privlin.evaluation`): a ``NonPrivateDpEvent`` (infinite ε) on the training split's ledger, and on the
    test split's unless ``public_test=True`` declares it public.  A capped ledger on either side refuses it; the
    test side's cap is checked before the training side is charged.

    Parameters
    ----------
    train, test : stores.Split or (X (n, D), y (n,)) pair
        Reference (labels used for the vote) and query rows; the same feature dimension D.
    k : int
        Neighbours per query (capped at the training size).
    budget, ledger
        As for :class:`privlin.DPLinearClassifier`, for the training side (a store split is always charged on its
        own ledger).
    public_test : bool
        Declare the test rows public: not charged (recorded on their ledger as declared public, and in the result).
    test_ledger : privlin.ledger.PrivacyLedger or None
        The ledger of test arrays (a store split always charges its own).
    weighted : bool
        Votes weighted by similarity (ties then break towards the nearer neighbours); else one vote each.
    cosine : bool
        Cosine similarity (rows L2-normalized, the usual choice for ViT features); else raw inner product.

    Returns
    -------
    KnnResult
        Not a private result: ``private=False``.
    """
    if int(k) < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    train, test = data.as_source(train, "train"), data.as_source(test, "test")
    if train.dim != test.dim:
        raise ValueError(f"train has D={train.dim} but test has D={test.dim}")
    test_side = dict(public=public_test, mechanism="privlin.knn/accuracy (test side)", ledger=test_ledger)
    evaluation.check_exact(test, **test_side)
    led = train.ledger(cap=budget, ledger=ledger)
    if led is not None:
        led.charge(_ev.NonPrivateDpEvent(), mechanism="privlin.knn/accuracy", epsilon=float("inf"), delta=0.0,
                   params={"k": int(k), "n": train.n, "note": "non-private reference: labels vote without noise"})
    test_charge = evaluation.charge_exact(test, params={"k": int(k)}, **test_side)
    index, train_y = _index(train, cosine)
    classes, train_code = np.unique(train_y, return_inverse=True)
    k = min(int(k), index.ntotal)
    correct = total = 0
    for X, y in _blocks(test):
        sim, nn = index.search(_normalized(X) if cosine else X, k)
        votes = np.zeros((len(y), len(classes)), dtype=np.float64)
        w = np.maximum(sim, 0.0) + 1e-6 if weighted else np.ones_like(sim)
        w = w * (1.0 + 1e-9 * np.arange(k, 0, -1))  # ties go to the nearer neighbour
        np.add.at(votes, (np.repeat(np.arange(len(y)), k), train_code[nn].ravel()), w.ravel())
        idx, known = data.label_index(classes, y)  # labels matched as a fit matches them: an odd one is never right
        correct += int(np.count_nonzero(known & (votes.argmax(1) == idx)))
        total += len(y)
    if total == 0:
        raise ValueError("the query side has no rows")
    return KnnResult(accuracy=correct / total, k=k, n_train=int(index.ntotal), n_test=total,
                     public_test=bool(public_test), test_charge=test_charge)


@dataclass(frozen=True)
class OverlapReport:
    """Private rows that have a near-duplicate ("twin") in a public set.

    Attributes
    ----------
    threshold : float
        Cosine similarity at or above which a public row counts as a twin.
    n_private, n_public : int
    n_with_twin : int
        Private rows whose most similar public row reaches ``threshold``.
    fraction : float
        ``n_with_twin / n_private``.
    private_ids, public_ids : ndarray of str (n_with_twin,)
        The twin pairs, most similar first.
    similarity : ndarray (n_with_twin,) float32
    max_similarity : ndarray (n_private,) float32
        Every private row's best similarity (histogram it to choose a threshold).
    charge : str
        What the private rows paid for this exact release (:func:`privlin.evaluation.charge_exact`).
    """

    threshold: float
    n_private: int
    n_public: int
    n_with_twin: int
    fraction: float
    private_ids: np.ndarray = field(repr=False)
    public_ids: np.ndarray = field(repr=False)
    similarity: np.ndarray = field(repr=False)
    max_similarity: np.ndarray = field(repr=False)
    charge: str = ""

    def summary(self, show: int = 5) -> str:
        """One paragraph for a log: counts and the closest pairs."""
        lines = [f"{self.n_with_twin} of {self.n_private} private rows ({100 * self.fraction:.2f}%) have a public "
                 f"twin with cosine similarity >= {self.threshold:g} among {self.n_public} public rows "
                 f"(non-private: {self.charge})"]
        for p, q, s in list(zip(self.private_ids, self.public_ids, self.similarity))[:show]:
            lines.append(f"  {p} ~ {q}  cos={s:.4f}")
        return "\n".join(lines)


def overlap_audit(public, private, *, threshold: float = 0.95, budget=None, ledger=None,
                  declare_public: bool = False) -> OverlapReport:
    """Find private rows with a near-duplicate in ``public`` by cosine similarity of their features.

    Parameters
    ----------
    public : stores.Split or (X (m, D), y) pair
        Features of the public (pretraining) data; held in memory as float32.
    private : stores.Split or (X (n, D), y) pair
        Features of the private data, same backbone and head; streamed in blocks.
    threshold : float in (-1, 1]
        Similarity at or above which a pair counts as a twin.  Exact copies give 1 (up to float16 rounding);
        choose it from ``max_similarity`` of a known-clean pair of sets.
    budget, ledger
        As for :class:`privlin.DPLinearClassifier`, for the private side (a store split always charges its own).
    declare_public : bool
        Declare the ``private`` rows public after all: nothing is charged (recorded on their ledger as declared).

    Returns
    -------
    OverlapReport
        Its counts, every row's similarity and the twins' private ids are exact, a non-private release about the
        private rows: charged before any is read as a ``NonPrivateDpEvent`` on their ledger (a capped one refuses;
        :mod:`privlin.evaluation`), unless ``declare_public``.  Arrays with no ledger are charged nothing, with a
        PrivacyLeakWarning.  Keep the report with the private data.
    """
    if not -1.0 < float(threshold) <= 1.0:
        raise ValueError(f"threshold must be in (-1, 1], got {threshold}")
    public, private = data.as_source(public, "train"), data.as_source(private, "train")
    if public.dim != private.dim:
        raise ValueError(f"public has D={public.dim} but private has D={private.dim}: "
                         "compare features of the same backbone and head")
    charge = evaluation.charge_exact(private, public=declare_public, mechanism="privlin.knn/overlap_audit",
                                     params={"threshold": float(threshold), "n_public": public.n}, budget=budget,
                                     ledger=ledger)
    if not declare_public and ledger is None and budget is None and private.ledger() is None:
        warnings.warn(f"overlap_audit releases exact per-row similarities and ids of the private rows; {charge}",
                      PrivacyLeakWarning, stacklevel=2)
    index, _ = _index(public, True)
    best_sim, best_nn = [], []
    for X, _y in _blocks(private):
        sim, nn = index.search(_normalized(X), 1)
        best_sim.append(sim[:, 0])
        best_nn.append(nn[:, 0])
    max_sim = np.concatenate(best_sim).astype(np.float32) if best_sim else np.zeros(0, np.float32)
    nn = np.concatenate(best_nn) if best_nn else np.zeros(0, np.int64)
    n_private = int(max_sim.size)
    if n_private == 0:
        raise ValueError("the private side has no rows")
    hit = np.flatnonzero(max_sim >= np.float32(threshold) - 1e-6)
    hit = hit[np.argsort(-max_sim[hit], kind="stable")]
    return OverlapReport(threshold=float(threshold), n_private=n_private, n_public=int(index.ntotal),
                         n_with_twin=int(hit.size), fraction=hit.size / n_private,
                         private_ids=private.ids()[hit], public_ids=public.ids()[nn[hit]],
                         similarity=max_sim[hit], max_similarity=max_sim, charge=charge)
