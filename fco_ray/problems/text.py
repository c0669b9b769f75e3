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

import copy
import hashlib
import os
import warnings
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ..data.stores import SparseNodes
from ..ops import regularizers as R
from ..ops.random import BATCH, PERMUTATION, Key
from ..ops.tree import Params
from .base import Problem
from .nodes import LocalPasses, SDCAPasses
from .registry import ProblemParams, register_problem
from ..runtime.files import replacing

if TYPE_CHECKING:  # scipy and numba (kernels_sparse) load on first use, not with the schemas
    import scipy.sparse as sp


def sparsity_scalings(nodes: SparseNodes) -> tuple[np.ndarray, np.ndarray]:
    """FSVRG's statistics (Alg. 4), from the nonzero pattern of the data.

    n^j = #samples with x_ij != 0, n_k^j the same on node k; phi^j = n^j / n,
    phi_k^j = n_k^j / n_k, s_k^j = phi^j / phi_k^j (returned at every stored nonzero, where
    n_k^j >= 1); omega^j = #nodes with n_k^j >= 1, a^j = K / omega^j (1 where omega^j = 0).
    """
    from ..ops.sparse_stats import sparsity_scalings as scalings
    s, omega = scalings(nodes.x.indices, nodes.x.indptr, nodes.offsets, nodes.dim)
    return s, np.where(omega > 0, nodes.num_clients / np.maximum(omega, 1), 1.0)


# ---- logistic pieces, vectorized over rows ---------------------------------------------------
def logistic(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """l(z) = log(1 + exp(-y z)) and l'(z) = -y sigmoid(-y z), elementwise."""
    from scipy.special import expit
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


def _load_cached_vector(path: Path, dim: int) -> np.ndarray | None:
    """The float64 vector of length `dim` in .npy file `path`, else None. The header is read
    first: a file whose header claims another shape (e.g. 10^12 floats) is never loaded
    (np.load would try to allocate it: MemoryError), nor one shorter than its header says."""
    try:
        with open(path, "rb") as f:
            fmt = np.lib.format
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(
                fmt.read_magic(f))
            if read is None:
                return None
            shape, _, dtype = read(f)
            if shape != (dim,) or dtype != np.dtype(np.float64) or dtype.hasobject:
                return None
            if os.fstat(f.fileno()).st_size - f.tell() != 8 * dim:  # truncated or padded
                return None
            data = np.fromfile(f, dtype=np.float64, count=dim)
    except (OSError, ValueError, EOFError):
        return None
    return data if data.shape == (dim,) else None


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


def _lane_blocks(members: int) -> list[tuple[np.ndarray, int]]:
    """Members in blocks of at most `kernels_sparse.GROUP_BLOCK` for the group kernels, as
    (member indices, real count); a block is padded to a multiple of `kernels_sparse.LANES`
    with copies of its first member (computed, then dropped)."""
    from ..ops import kernels_sparse as K
    blocks = []
    for start in range(0, members, K.GROUP_BLOCK):
        real = np.arange(start, min(start + K.GROUP_BLOCK, members))
        pad = -len(real) % K.LANES
        blocks.append((np.concatenate([real, np.full(pad, start)]), len(real)))
    return blocks


def _ids(key: Key) -> np.ndarray:
    return np.ascontiguousarray(key.client_ids, np.uint64)


@dataclass
class Optimum:
    """The centralized solution on the pooled training data (iterations 0: read from the cache)."""

    w: np.ndarray
    value: float
    grad_norm: float
    test_error: float
    iterations: int


#: a w* (cached or freshly solved) is trusted only if ||grad f(w*)|| is at most this; then
#: f(w*) - min f <= ||grad f||^2 / (2 lam) (f is lam-strongly convex): 1e-10 at E7's lam = 1/n
OPTIMUM_GRAD_TOL = 1e-8


@dataclass
class SparseTextLogReg(Problem):
    """See the module docstring. `aggregation` is FSVRG's A = diag(a^j) (global, (d,)).

    Besides the `Problem` interface it offers the finite-sum "nodes" interface that the SVRG
    family uses (`fco_ray.problems.nodes.Nodes`), with compiled per-node passes
    (`fco_ray.ops.kernels_sparse`).
    """


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
        scaled = copy.copy(train)  # the caller's nodes stay as they are; no second validation
        scaled.scale = scale
        return cls(train=scaled, val=test, shapes=shapes,
                   psi=R.Blockwise({}, shapes), name=name, info=dict(info or {}), lam=lam,
                   total_samples=n, aggregation=aggregation)

    def __getstate__(self):
        # the cached optimum is for the driver's metrics; shards never need it
        state = dict(self.__dict__)
        state.pop("optimum", None)
        return state

    # ---- the "nodes" interface: compiled per-node passes ------------------------------------
    def node_sizes(self, rows) -> np.ndarray:
        """n_k of the training nodes `rows` (local indices)."""
        return self.train.sizes[np.asarray(rows, np.int64)]

    def _csr(self):
        x = self.train.x
        return x.data, x.indices, x.indptr, self.train.y

    def node_gradient_sum(self, rows, w: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """sum_k weights_k grad F_k(w) over the nodes `rows`, with
        grad F_k(w) = (1/n_k) sum_{i in k} l_i'(<x_i, w>) x_i + lam w.
        A stack w (G, d) of a fused group gives (G, d), one pass over the data for all."""
        from ..ops import kernels_sparse as K
        rows = np.asarray(rows, np.int64)
        coef = weights / self.node_sizes(rows)
        w = np.asarray(w, np.float64)
        if w.ndim == 2:
            out = np.empty_like(w)
            for lanes, real in _lane_blocks(len(w)):
                part = np.zeros((self.train.dim, len(lanes)))
                K.gradient_sum_group(*self._csr(), self.train.offsets, rows, coef,
                                     np.ascontiguousarray(w[lanes].T), part)
                out[lanes[:real]] = part.T[:real]
        else:
            out = np.zeros(self.train.dim)
            K.gradient_sum(*self._csr(), self.train.offsets, rows, coef, np.ascontiguousarray(w), out)
        out += (self.lam * weights.sum()) * w
        return out

    def node_pass_sum(self, rows, key: Key, w: np.ndarray, g: np.ndarray, weights: np.ndarray,
                      local: LocalPasses) -> np.ndarray:
        """sum_k weights_k (w_k - w): node k's local SVRG-type passes from w (see
        `kernels_sparse.svrg_passes`) with step h_k, drift eta g, proximal weight mu and, if
        `scaled`, FSVRG's s_k^j, as `local` says (`LocalPasses`).

        A fused group of G members: w and g stacks (G, d), h (nodes, G), eta and mu numbers
        or (G,); returns (G, d), member m equal to its own call, in one pass over the data
        (`kernels_sparse.svrg_passes_group`)."""
        from ..ops import kernels_sparse as K
        h, steps, scaled, passes, eta, mu = (local.h, local.steps, local.scaled, local.passes,
                                             local.eta, local.mu)
        rows = np.asarray(rows, np.int64)
        sizes = self.node_sizes(rows)
        replace = steps is not None
        steps = sizes if steps is None else np.asarray(steps, np.int64)
        if replace and passes != 1:
            raise ValueError("passes with replacement: only one pass is supported")
        if max(int(steps.max(initial=0)), int(sizes.max(initial=0))) >= 1 << K.POSITION_BITS:
            raise ValueError(f"a node has {max(steps.max(), sizes.max())} samples or local steps; "
                             f"at most {(1 << K.POSITION_BITS) - 1}")
        if scaled and self.train.scale is None:
            raise ValueError("scaled passes need the FSVRG scalings (build with from_nodes)")
        scale = self.train.scale if scaled else np.empty(0)
        w, g = np.asarray(w, np.float64), np.asarray(g, np.float64)
        common = (*self._csr(), scale, self.train.offsets, rows, _ids(key), key.seed, key.round,
                  BATCH if replace else PERMUTATION, replace, steps)
        if w.ndim == 2:
            members = w.shape[0]
            h = np.asarray(h, np.float64)
            h = np.broadcast_to(h[:, None] if h.ndim == 1 else h, (len(rows), members))
            mu = np.broadcast_to(np.asarray(mu, np.float64), (members,))
            eta = np.broadcast_to(np.asarray(eta, np.float64), (members,))
            out = np.empty_like(w)
            for lanes, real in _lane_blocks(members):
                part = np.zeros((self.train.dim, len(lanes)))
                alpha = K.svrg_passes_group(
                    *common, np.ascontiguousarray(h[:, lanes]), np.asarray(weights, np.float64),
                    self.lam, mu[lanes].copy(), eta[lanes].copy(), int(passes),
                    np.ascontiguousarray(w[lanes].T), np.ascontiguousarray(g[lanes].T), part)
                out[lanes[:real]] = part.T[:real] + alpha[:real, None] * g[lanes[:real]]
            return out  # (the alpha term: the coordinates off each node's support)
        out = np.zeros(self.train.dim)
        alpha = K.svrg_passes(*common, np.asarray(h, np.float64), np.asarray(weights, np.float64),
                              self.lam, float(mu), float(eta), int(passes),
                              np.ascontiguousarray(w), np.ascontiguousarray(g), out)
        out += alpha * g  # the coordinates off each node's support
        return out

    def node_sdca_sum(self, rows, key: Key, w: np.ndarray, duals: np.ndarray, weights: np.ndarray,
                      local: SDCAPasses) -> np.ndarray:
        """sum_k weights_k (v_k - w) / sigma after CoCoA+'s local SDCA passes (see
        `kernels_sparse.sdca_passes`; scale sigma / (lam n)); `duals` (b = y alpha of the
        nodes' samples, node after node) are updated in place."""
        from ..ops import kernels_sparse as K
        passes, sigma, n = local.passes, local.sigma, local.n
        rows = np.asarray(rows, np.int64)
        sizes = self.node_sizes(rows)
        out = np.zeros(self.train.dim)
        K.sdca_passes(*self._csr(), self.train.offsets, rows, _ids(key), key.seed, key.round,
                      PERMUTATION, int(passes), sigma / (self.lam * n), duals,
                      np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
                      np.asarray(weights, np.float64) / sigma,
                      np.ascontiguousarray(w, np.float64), out)
        return out

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

    def objective_value(self, w: np.ndarray) -> float:
        """f(w) alone (the metrics need no gradient)."""
        loss = np.logaddexp(0.0, -self.train.y * (self.train.x @ w))
        return float(loss.sum() / len(loss) + 0.5 * self.lam * (w @ w))  # as in full_loss_grad

    # ---- reference solution and metrics ---------------------------------------------------
    @cached_property
    def optimum(self) -> Optimum:
        """w* = argmin f by L-BFGS on the pooled training data (strongly convex: unique).

        Solved once per problem object, and cached on disk (see `optimum_cache_dir`) by a
        fingerprint of the training data and lam, so the trials of a sweep share one solve.
        A cached w* is used only if its gradient norm is at most OPTIMUM_GRAD_TOL (a stale
        or corrupted file is solved again, with a warning), and a solve is cached only if
        it reaches that tolerance.
        """
        path = optimum_cache_dir()
        path = None if path is None else path / f"{data_fingerprint(self.train, self.lam)}.npy"
        w, iterations = None, 0
        if path is not None and path.is_file():
            w = _load_cached_vector(path, self.train.dim)  # None: unreadable, solve again
            if w is not None and (w.shape != (self.train.dim,) or not np.all(np.isfinite(w))):
                w = None
            if w is not None:
                residual = float(np.linalg.norm(self.full_loss_grad({"w": w})[1]["w"]))
                if not residual <= OPTIMUM_GRAD_TOL:
                    warnings.warn(f"cached optimum {path} has ||grad f|| = {residual:.3g} > "
                                  f"{OPTIMUM_GRAD_TOL:g}: not the optimum of this problem; "
                                  "solving again", RuntimeWarning, stacklevel=2)
                    w = None
        if w is None:
            # imported here, not at the top: scipy.optimize costs every process that imports
            # fco_ray (the driver, each Ray actor, each Tune trial) 0.3-0.6 s, and only
            # this solve uses it
            from scipy.optimize import minimize

            def fun(v):
                value, grad = self.full_loss_grad({"w": v})
                return value, grad["w"]

            res = minimize(fun, np.zeros(self.train.dim), jac=True, method="L-BFGS-B",
                           options={"maxiter": 20000, "maxcor": 30, "ftol": 1e-16, "gtol": 1e-11})
            w, iterations = res.x, int(res.nit)
            residual = float(np.linalg.norm(fun(w)[1]))
            if not residual <= OPTIMUM_GRAD_TOL:
                warnings.warn(f"L-BFGS stopped at ||grad f|| = {residual:.3g} > {OPTIMUM_GRAD_TOL:g} "
                              f"({res.message}); suboptimality is measured against this w*, "
                              "which is not cached", RuntimeWarning, stacklevel=2)
            elif path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                with replacing(path) as temp:  # atomic: concurrent trials never read half a file
                    np.save(temp, w)
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
            value = self.objective_value(params["w"])
            out = {"train_loss": value, "suboptimality": value - self.optimum.value}
            if self.val is not None:
                out["test_error"] = self.test_error(params["w"])
        return out


# ---- config --------------------------------------------------------------------------------
def _mean_size(low: int, high: int, a: float) -> float:
    """Mean of the Pareto(a) law truncated to [low, high] (text_generator.power_law_sizes)."""
    if low == high:
        return float(low)
    tail = (low / high) ** a
    if a == 1:
        return low * np.log(high / low) / (1 - tail)
    return low**a * a / (a - 1) * (low ** (1 - a) - high ** (1 - a)) / (1 - tail)


class SparseTextParams(ProblemParams):
    """E7 (Konecny et al. 2016, Fig. 2). Defaults: a generated stand-in for the paper's
    (non-public) data: 10,000 authors with 75..9,000 posts each (power law), d = 20,000
    words, `lam = 1/n`, label skew and word sparsity calibrated to the paper's data statistics
    (`results/e7_calibration.py`). `dataset: libsvm` reads real data instead (see
    fco_ray.data.libsvm)."""

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
    topic_concentration: float = Field(0.03, gt=0, allow_inf_nan=False,
                                       description="Dirichlet parameter of an author's topic mix")
    topic_weight: float = Field(0.5, ge=0, le=1, description="share of topic-specific words")
    zipf_exponent: float = Field(1.2, gt=0, allow_inf_nan=False)
    words_per_doc: float = Field(20.0, ge=1, allow_inf_nan=False)
    signal: float = Field(0.5, ge=0, allow_inf_nan=False, description="scale of the true margin")
    author_bias: float = Field(2.5, ge=0, allow_inf_nan=False, description="std of per-author label bias")
    topic_signal: float = Field(2.2, ge=0, allow_inf_nan=False,
                                description="std of the per-topic label effect")
    positive_share: float | None = Field(0.3316, gt=0, lt=1, allow_inf_nan=False,
                                         description="expected share of +1 labels (None: no offset)")
    # LIBSVM (dataset: libsvm)
    path: str | None = Field(None, description="LIBSVM training file")
    test_path: str | None = Field(None, description="LIBSVM test file; None = split test_fraction")
    node_column: str | int = Field("qid", description="'qid' or the feature column holding node ids")
    group_file: str | None = Field(None, description="one node id per training line (overrides node_column)")

    def estimated_bytes(self):
        if self.dataset != "generated":
            return None  # bounded by the LIBSVM file, read line by line
        # sizes are floored draws: at least the mean less one
        docs = self.clients * max(_mean_size(self.min_samples, self.max_samples, self.size_exponent) - 1,
                                  self.min_samples)
        docs /= 1 - self.test_fraction
        # sparse rows: a float64 value and an int32 index per word, kept in two copies
        return {f"the documents (problem.clients={self.clients} x about {docs / self.clients:,.0f} "
                f"x problem.words_per_doc={self.words_per_doc:g} words, 12 bytes each, twice)":
                int(2 * 12 * docs * self.words_per_doc),
                "the labels' logits and draws (16 bytes per post)": int(16 * docs),
                f"the topics (problem.topics={self.topics} x problem.dim={self.dim} floats)":
                8 * self.topics * self.dim}

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
                  "signal", "author_bias", "topic_signal", "positive_share", "test_fraction")


@register_problem("sparse_text_logreg", SparseTextParams)
def build_sparse_text(p: SparseTextParams, seed: int) -> SparseTextLogReg:
    from ..data import text_generator

    if p.dataset == "generated":
        train, test = text_generator.generate_text_nodes(
            seed=seed, **{k: getattr(p, k) for k in GENERATOR_KEYS})
    else:
        from ..data import libsvm  # imports scikit-learn (seconds): only when needed

        train, test = libsvm.load_libsvm_problem_data(
            p.path, test_path=p.test_path, node_column=p.node_column, group_file=p.group_file,
            test_fraction=p.test_fraction, seed=seed)
    if p.reshuffle:
        train = text_generator.reshuffle_nodes(train, seed)
    return SparseTextLogReg.from_nodes(train, test, lam=p.lam,
                                       info={"dataset": p.dataset, "reshuffled": p.reshuffle})
