"""E7: L2-regularized logistic regression on sparse bag-of-words data, one node per author
(Konecny, McMahan, Ramage, Richtarik 2016).

Objective (the paper's, sample-weighted over nodes; note the base `Problem` uses a uniform
mean over clients instead):

    f(w) = sum_k (n_k / n) F_k(w) = (1/n) sum_i f_i(w),
    f_i(w) = log(1 + exp(-y_i <x_i, w>)) + (lam / 2) ||w||^2,   y_i in {-1, +1},

with `lam = 1/n` by default. The L2 term is part of every f_i (so `psi = 0`), as in the
paper's `grad f_i(w_k) - grad f_i(w^t)`. Labels in {0, 1} are mapped to {-1, +1}.

Data stay `scipy.sparse` CSR end to end (`SparseNodes`): node k owns rows
`offsets[k]:offsets[k+1]`; nothing ever densifies the data matrix, so memory is
O(nnz + n + d). Models are dense (d,) vectors (stacks of them, (C, d), for C nodes).

Metrics: `train_loss` = f(w), `suboptimality` = f(w) - f(w*) with w* from L-BFGS on the
pooled training data (computed once, cached on the problem and on disk: `problem.optimum`), and
`test_error` = fraction of held-out samples with sign(<x, w>) != y (the held-out set is
`problem.val`, one block of pooled rows).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator
from scipy.optimize import minimize
from scipy.special import expit

from .. import regularizers as R
from ..random import Key
from ..tree import Params
from .registry import ProblemParams, register_problem
from .base import Problem


def as_pm1(y) -> np.ndarray:
    """Labels as floats in {-1, +1}: {0, 1} maps 0 -> -1; anything else is an error."""
    y = np.asarray(y, dtype=float).ravel()
    values = set(np.unique(y).tolist())
    if values <= {-1.0, 1.0}:
        return y
    if values <= {0.0, 1.0}:
        return 2.0 * y - 1.0
    shown = sorted(values)[:6]
    raise ValueError(f"labels must be in {{-1, +1}} or {{0, 1}}, got values {shown}"
                     f"{' ...' if len(values) > 6 else ''}")


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for every (s, l), without a Python loop."""
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - ends + lengths, lengths) + np.arange(ends[-1] if len(ends) else 0)


@dataclass
class SparseNodes:
    """Per-node sparse data: CSR rows grouped by node (node k = rows offsets[k]:offsets[k+1]).

    `scale` (optional) holds FSVRG's per-coordinate scaling s_k^j at every stored nonzero
    (aligned with `x.data`), computed once from the whole training set, so that shards keep
    the global statistics. `memory` is node-resident algorithm state (e.g. CoCoA+ duals,
    indexed by row); a proper subset from `take` starts with an empty one.
    """

    x: sp.csr_matrix
    y: np.ndarray
    sizes: np.ndarray
    scale: np.ndarray | None = None
    memory: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if not sp.issparse(self.x):
            raise ValueError(f"SparseNodes.x must be a scipy.sparse matrix, got {type(self.x).__name__}")
        self.x = sp.csr_matrix(self.x, dtype=np.float64)
        if not self.x.has_canonical_format or np.any(self.x.data == 0):
            self.x = self.x.copy()  # the fixes below work in place: leave the caller's matrix alone
            self.x.sum_duplicates()  # sorted, unique column indices per row
            self.x.eliminate_zeros()  # stored entries = the nonzero pattern FSVRG counts
        self.sizes = np.asarray(self.sizes, dtype=np.int64)
        if self.sizes.ndim != 1 or len(self.sizes) == 0 or np.any(self.sizes < 1):
            raise ValueError(f"SparseNodes.sizes must be a non-empty 1-D array of counts >= 1, "
                             f"got {self.sizes if self.sizes.size < 8 else self.sizes[:8]}")
        if self.x.shape[0] != self.sizes.sum():
            raise ValueError(f"SparseNodes: x has {self.x.shape[0]} rows but sizes sum to {self.sizes.sum()}")
        self.y = as_pm1(self.y)
        if len(self.y) != self.x.shape[0]:
            raise ValueError(f"SparseNodes: {len(self.y)} labels for {self.x.shape[0]} rows")
        if self.scale is not None and len(self.scale) != self.x.nnz:
            raise ValueError(f"SparseNodes.scale has {len(self.scale)} entries for {self.x.nnz} nonzeros")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])

    @property
    def num_clients(self) -> int:
        return len(self.sizes)

    @property
    def dim(self) -> int:
        return self.x.shape[1]

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The raw arrays (what a shard holds in memory)."""
        out = {"data": self.x.data, "indices": self.x.indices, "indptr": self.x.indptr, "y": self.y}
        if self.scale is not None:
            out["scale"] = self.scale
        return out

    def node_of_row(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_clients), self.sizes)

    def rows_of(self, nodes) -> np.ndarray:
        """Row indices (into x) of the given nodes, node by node."""
        nodes = np.asarray(nodes, dtype=np.int64)
        return ranges(self.offsets[nodes], self.sizes[nodes])

    def take(self, nodes) -> "SparseNodes":
        """The given nodes (in that order) as SparseNodes; O(their nnz). All nodes in order:
        `self` (nothing mutates node data, so no copy is needed)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) == self.num_clients and np.array_equal(nodes, np.arange(self.num_clients)):
            return self
        rows = self.rows_of(nodes)
        lengths = np.diff(self.x.indptr)[rows]
        pos = ranges(self.x.indptr[rows], lengths)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        x = sp.csr_matrix((self.x.data[pos], self.x.indices[pos], indptr), shape=(len(rows), self.dim))
        x.has_canonical_format = True  # rows are copied whole, so still sorted and unique
        return SparseNodes(x, self.y[rows], self.sizes[nodes],
                           None if self.scale is None else self.scale[pos])


def sparsity_scalings(nodes: SparseNodes) -> tuple[np.ndarray, np.ndarray]:
    """FSVRG's statistics (Alg. 4), from the nonzero pattern of the data.

    n^j = #samples with x_ij != 0, n_k^j the same on node k; phi^j = n^j / n,
    phi_k^j = n_k^j / n_k, s_k^j = phi^j / phi_k^j (returned at every stored nonzero, where
    n_k^j >= 1); omega^j = #nodes with n_k^j >= 1, a^j = K / omega^j (1 where omega^j = 0).
    """
    x, d = nodes.x, nodes.dim
    cols = x.indices.astype(np.int64)
    node = np.repeat(nodes.node_of_row(), np.diff(x.indptr))
    n_j = np.bincount(cols, minlength=d)
    pairs, inverse, n_kj = np.unique(node * d + cols, return_inverse=True, return_counts=True)
    s = (n_j[cols] * nodes.sizes[node]) / (x.shape[0] * n_kj[inverse])
    omega = np.bincount(pairs % d, minlength=d)
    return s, np.where(omega > 0, nodes.num_clients / np.maximum(omega, 1), 1.0)


# ---- logistic pieces, vectorized over rows ---------------------------------------------------
def logistic(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """l(z) = log(1 + exp(-y z)) and l'(z) = -y sigmoid(-y z), elementwise."""
    return np.logaddexp(0.0, -y * z), -y * expit(-y * z)


def margins(x: sp.csr_matrix, w: np.ndarray, owner: np.ndarray | None = None) -> np.ndarray:
    """<x_i, w> for a shared w (d,), or <x_i, W[owner[i]]> for a stack W (C, d)."""
    if w.ndim == 1:
        return x @ w
    row = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
    return np.bincount(row, weights=x.data * w[owner[row], x.indices], minlength=x.shape[0])


def scatter_rows(x: sp.csr_matrix, coef: np.ndarray, owner: np.ndarray, clients: int) -> np.ndarray:
    """(clients, d) dense: row c = sum_{i: owner[i] = c} coef_i x_i (O(nnz + clients d))."""
    d = x.shape[1]
    row = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
    flat = np.bincount(owner[row].astype(np.int64) * d + x.indices, weights=coef[row] * x.data,
                       minlength=clients * d)
    return flat.reshape(clients, d)


def node_loss_grads(nodes: SparseNodes, w: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """F_k and grad F_k of every node at a shared w (d,) or its own w_k (C, d): (C,), (C, d)."""
    owner = nodes.node_of_row()
    loss, dloss = logistic(margins(nodes.x, w, owner), nodes.y)
    inv = 1.0 / nodes.sizes
    w_stack = np.broadcast_to(w, (nodes.num_clients, nodes.dim))
    values = np.bincount(owner, weights=loss, minlength=nodes.num_clients) * inv
    grads = scatter_rows(nodes.x, dloss * inv[owner], owner, nodes.num_clients) + lam * w_stack
    return values + 0.5 * lam * np.einsum("cd,cd->c", w_stack, w_stack), grads


def optimum_cache_dir() -> Path | None:
    """$FCO_RAY_CACHE/optima (default ~/.cache/fco_ray/optima); FCO_RAY_CACHE=off disables."""
    root = os.environ.get("FCO_RAY_CACHE", str(Path.home() / ".cache" / "fco_ray"))
    return None if root.strip().lower() in ("", "off", "0", "none") else Path(root) / "optima"


def data_fingerprint(nodes: SparseNodes, lam: float) -> str:
    """sha256 of the pooled training data (CSR arrays, labels) and lam."""
    digest = hashlib.sha256()
    for array in (nodes.x.indptr, nodes.x.indices, nodes.x.data, nodes.y, np.float64(lam)):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:40]


@dataclass
class Optimum:
    """The centralized solution on the pooled training data (iterations 0: read from the cache)."""

    w: np.ndarray
    value: float
    grad_norm: float
    test_error: float
    iterations: int


@dataclass
class SparseTextLogReg(Problem):
    """See the module docstring. `aggregation` is FSVRG's A = diag(a^j) (global, (d,))."""

    lam: float = 0.0
    total_samples: int = 0
    aggregation: np.ndarray | None = None
    kinds: ClassVar[frozenset[str]] = frozenset({"minimize", "nodes"})

    @classmethod
    def from_nodes(cls, train: SparseNodes, test: SparseNodes | None = None, *,
                   lam: float | None = None, name: str = "sparse_text_logreg",
                   info: dict | None = None) -> "SparseTextLogReg":
        """Build the problem; `lam=None` means 1/n. Computes the FSVRG scalings once."""
        if test is not None and test.dim != train.dim:
            raise ValueError(f"test data has {test.dim} features, training data {train.dim}")
        n = train.x.shape[0]
        lam = 1.0 / n if lam is None else float(lam)
        if not lam > 0:
            raise ValueError(f"lam must be > 0, got {lam}")
        scale, aggregation = sparsity_scalings(train)
        shapes = {"w": (train.dim,)}
        return cls(train=replace(train, scale=scale), val=test, shapes=shapes,
                   psi=R.Blockwise({}, shapes), name=name, info=dict(info or {}), lam=lam,
                   total_samples=n, aggregation=aggregation)

    def __getstate__(self):
        # the cached optimum is for the driver's metrics; shards never need it
        state = dict(self.__dict__)
        state.pop("optimum", None)
        return state

    # ---- stochastic / full gradients ------------------------------------------------------
    def minibatch(self, rows: np.ndarray, key: Key, batch_size: int | None) -> dict[str, np.ndarray]:
        """Sample indices (into train.x) per client, drawn with replacement, and weights."""
        sizes, starts = self.train.sizes[rows], self.train.offsets[rows]
        if batch_size is None:
            pos = np.arange(sizes.max())[None, :]
            weight = (pos < sizes[:, None]) / sizes[:, None]
            return {"sample": starts[:, None] + np.minimum(pos, sizes[:, None] - 1), "weight": weight}
        idx = key.integers(sizes, batch_size)
        return {"sample": starts[:, None] + idx, "weight": np.full(idx.shape, 1.0 / batch_size)}

    def loss_and_grad(self, params: Params, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, Params]:
        """sum_b weight_b f_{i_b}(w_c) and its gradient for a stack of clients (C, d)."""
        sample, weight = batch["sample"], batch["weight"].ravel()
        clients, per = sample.shape
        w = np.broadcast_to(params["w"], (clients, self.train.dim))
        x = self.train.x[sample.ravel()]
        owner = np.repeat(np.arange(clients), per)
        loss, dloss = logistic(margins(x, w, owner), self.train.y[sample.ravel()])
        values = (weight * loss).reshape(clients, per).sum(axis=1) + 0.5 * self.lam * np.einsum("cd,cd->c", w, w)
        return values, {"w": scatter_rows(x, weight * dloss, owner, clients) + self.lam * w}

    def full_loss_grad(self, params: Params, data: SparseNodes | None = None) -> tuple[float, Params]:
        """f(w) and grad f(w) over all samples of `data` (default: training), sample-weighted."""
        data = self.train if data is None else data
        w = params["w"]
        loss, dloss = logistic(data.x @ w, data.y)
        n = len(data.y)
        value = float(loss.sum() / n + 0.5 * self.lam * (w @ w))
        return value, {"w": data.x.T @ dloss / n + self.lam * w}

    # ---- reference solution and metrics ---------------------------------------------------
    @cached_property
    def optimum(self) -> Optimum:
        """w* = argmin f by L-BFGS on the pooled training data (strongly convex: unique).

        Solved once per problem object, and cached on disk (see `optimum_cache_dir`) by a
        fingerprint of the training data and lam, so the trials of a sweep share one solve.
        """
        path = optimum_cache_dir()
        path = None if path is None else path / f"{data_fingerprint(self.train, self.lam)}.npy"
        w, iterations = None, 0
        if path is not None and path.is_file():
            try:
                w = np.load(path)
            except (OSError, ValueError):
                w = None  # unreadable: solve again
            if w is not None and (w.shape != (self.train.dim,) or not np.all(np.isfinite(w))):
                w = None
        if w is None:
            def fun(v):
                value, grad = self.full_loss_grad({"w": v})
                return value, grad["w"]

            res = minimize(fun, np.zeros(self.train.dim), jac=True, method="L-BFGS-B",
                           options={"maxiter": 20000, "maxcor": 30, "ftol": 1e-16, "gtol": 1e-11})
            w, iterations = res.x, int(res.nit)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
                np.save(tmp, w)
                os.replace(tmp, path)  # atomic: concurrent trials never read half a file
        value, grad = self.full_loss_grad({"w": w})
        return Optimum(w, value, float(np.linalg.norm(grad["w"])), self.test_error(w), iterations)

    def test_error(self, w: np.ndarray) -> float:
        """Fraction of held-out samples misclassified by sign(<x, w>) (ties count as -1)."""
        if self.val is None:
            return float("nan")
        predicted = np.where(self.val.x @ w > 0, 1.0, -1.0)
        return float(np.mean(predicted != self.val.y))

    def metric_names(self) -> list[str]:
        """Known without solving for w* (which `metrics` needs)."""
        return ["train_loss", "suboptimality"] + (["test_error"] if self.val is not None else [])

    def metrics(self, params: Params) -> dict[str, float]:
        with np.errstate(all="ignore"):
            value = self.full_loss_grad(params)[0]
            out = {"train_loss": value, "suboptimality": value - self.optimum.value}
            if self.val is not None:
                out["test_error"] = self.test_error(params["w"])
        return out


# ---- config --------------------------------------------------------------------------------
class SparseTextParams(ProblemParams):
    """E7 (Konecny et al. 2016, Fig. 2). Defaults: a generated stand-in for the paper's
    (non-public) data: 10,000 authors with 75..9,000 posts each (power law), d = 20,000
    words, `lam = 1/n`. `dataset: libsvm` reads real data instead (see fco_ray.data.libsvm)."""

    problem_class: ClassVar[type[Problem]] = SparseTextLogReg

    name: Literal["sparse_text_logreg"] = "sparse_text_logreg"
    dataset: Literal["generated", "libsvm"] = "generated"
    lam: float | None = Field(None, gt=0, allow_inf_nan=False, description="None = 1/n")
    reshuffle: bool = Field(False, description="FSVRGR: shuffle samples over nodes, same sizes")
    test_fraction: float = Field(0.1, ge=0, lt=1, description="held-out share of each node's data")
    # generator (dataset: generated)
    clients: int = Field(10000, ge=1)
    min_samples: int = Field(75, ge=1, description="smallest node (training samples)")
    max_samples: int = Field(9000, ge=1, description="largest node (training samples)")
    size_exponent: float = Field(1.5, gt=0, allow_inf_nan=False, description="Pareto tail of node sizes")
    dim: int = Field(20000, ge=2, description="vocabulary size")
    topics: int = Field(20, ge=1)
    topic_concentration: float = Field(0.1, gt=0, allow_inf_nan=False,
                                       description="Dirichlet parameter of an author's topic mix")
    topic_weight: float = Field(0.5, ge=0, le=1, description="share of topic-specific words")
    zipf_exponent: float = Field(1.0, gt=0, allow_inf_nan=False)
    words_per_doc: float = Field(20.0, ge=1, allow_inf_nan=False)
    signal: float = Field(3.0, ge=0, allow_inf_nan=False, description="scale of the true margin")
    author_bias: float = Field(1.0, ge=0, allow_inf_nan=False, description="std of per-author label bias")
    # LIBSVM (dataset: libsvm)
    path: str | None = Field(None, description="LIBSVM training file")
    test_path: str | None = Field(None, description="LIBSVM test file; None = split test_fraction")
    node_column: str | int = Field("qid", description="'qid' or the feature column holding node ids")
    group_file: str | None = Field(None, description="one node id per training line (overrides node_column)")

    @model_validator(mode="after")
    def _check(self):
        if self.min_samples > self.max_samples:
            raise ValueError(f"problem.min_samples ({self.min_samples}) must be <= "
                             f"problem.max_samples ({self.max_samples})")
        if self.dataset == "libsvm" and self.path is None:
            raise ValueError("problem.path is required with problem.dataset = 'libsvm'")
        if self.dataset == "generated":
            given = [k for k in ("path", "test_path", "group_file") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"problem.{given[0]} is only used with problem.dataset = 'libsvm' "
                                 f"(dataset is 'generated')")
        if isinstance(self.node_column, str) and self.node_column != "qid":
            raise ValueError(f"problem.node_column must be 'qid' or a feature column index >= 0, "
                             f"got {self.node_column!r}")
        if isinstance(self.node_column, int) and self.node_column < 0:
            raise ValueError(f"problem.node_column must be 'qid' or a feature column index >= 0, "
                             f"got {self.node_column}")
        return self


GENERATOR_KEYS = ("clients", "min_samples", "max_samples", "size_exponent", "dim", "topics",
                  "topic_concentration", "topic_weight", "zipf_exponent", "words_per_doc",
                  "signal", "author_bias", "test_fraction")


@register_problem("sparse_text_logreg", SparseTextParams)
def build_sparse_text(p: SparseTextParams, seed: int) -> SparseTextLogReg:
    from ..data import libsvm, text_generator

    if p.dataset == "generated":
        train, test = text_generator.generate_text_nodes(
            seed=seed, **{k: getattr(p, k) for k in GENERATOR_KEYS})
    else:
        train, test = libsvm.load_libsvm_problem_data(
            p.path, test_path=p.test_path, node_column=p.node_column, group_file=p.group_file,
            test_fraction=p.test_fraction, seed=seed)
    if p.reshuffle:
        train = text_generator.reshuffle_nodes(train, seed)
    return SparseTextLogReg.from_nodes(train, test, lam=p.lam,
                                       info={"dataset": p.dataset, "reshuffled": p.reshuffle})
