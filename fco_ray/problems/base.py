"""The Problem interface: federated data, stochastic gradients of a stack of clients, metrics.

A problem owns its training clients' data in a store (`fco_ray.data.stores`); the default
store is *stacked, padded* arrays: every array in
`ClientData.arrays` has shape `(clients, max_samples, ...)`, and `ClientData.sizes[c]` says
how many leading rows of client `c` are real. Losses are averages with explicit per-sample
weights (`weight`, summing to one per client), so unequal client sizes need no special case.

The composite objective is `Phi(w) = F(w) + psi(w)` with `F = (1/M) sum_m F_m`, where `F_m`
is the mean loss over client m's samples and `psi` is `self.psi` (a `Blockwise` regularizer).

To write a custom problem, subclass `Problem` and implement `init_params`,
`loss_and_grad` and (optionally) `evaluate`; see docs/problems.md "Custom problems". Its
clients' gradients then come from `loss_and_grad` on their minibatches (`grad`, called from
the algorithms' compiled rules: `fco_ray.rules.numpy_problem`); a `rule` in JAX
(docs/custom_rules.md) runs them compiled, on a GPU too. One optional speed hook changes no
numbers beyond rounding: `metrics_stack` (the metrics of a fused group's G models at once).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..data.stores import ClientData, ClientStore
from ..ops.random import Key
from ..ops.regularizers import Blockwise
from ..ops.tree import Params
from ..runtime.refs import resolve


@dataclass
class Problem(abc.ABC):
    """Base class. Subclasses set `name`, `shapes` and `psi`, and implement the hooks below.

    `train` is any `ClientStore` (`fco_ray.data.stores`); the default `minibatch` and
    `full_loss_grad` below work on dense `ClientData`, a problem on another store (e.g.
    `SparseNodes`) overrides them."""

    train: ClientStore
    val: ClientStore | None
    shapes: dict[str, tuple[int, ...]]
    psi: Blockwise
    name: str = "custom"
    info: dict[str, Any] = field(default_factory=dict)
    #: what this problem offers the algorithms (fco_ray.algorithms.base.PROBLEM_KINDS)
    kinds: ClassVar[frozenset[str]] = frozenset({"minimize"})
    #: the problem's rule for one model and one client in JAX (`fco_ray.rules.problems`): a
    #: factory `(problem, batch_size) -> rule or None`, or "module:name" imported when a
    #: device backend asks. Read on the class that declares it only: a subclass (which may
    #: change the gradient) declares its own.
    rule: ClassVar = None

    @classmethod
    def pictures(cls, model: dict, folder) -> list:
        """Pictures of a final `model` (a run's artifacts beside `model.npz`), written to
        `folder`; their paths. None by default; E6 draws its attack."""
        return []

    @classmethod
    def has_rule(cls) -> bool:
        return vars(cls).get("rule") is not None

    def make_rule(self, batch_size: int | None):
        """This problem's own one-member rule (`rule`), or None for a class without one or a
        psi its rule does not cover (then `fco_ray.rules.numpy_problem.problem_rule` calls its
        NumPy methods back from the compiled program: the same numbers, at NumPy's speed)."""
        return resolve(vars(type(self))["rule"])(self, batch_size) if self.has_rule() else None

    # ---- hooks for subclasses ---------------------------------------------------------
    def init_params(self, rng: np.random.Generator) -> Params:
        """Initial model (unbatched). Default: zeros."""
        return {k: np.zeros(s) for k, s in self.shapes.items()}

    @abc.abstractmethod
    def loss_and_grad(self, params: Params, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, Params]:
        """Weighted loss and gradient of a stack of clients.

        `params` blocks have a leading client axis C (possibly a read-only broadcast view);
        `batch` arrays have shape (C, B, ...) and `batch["weight"]` (C, B) sums to one per client.
        Return the per-client loss (C,) and per-client gradients (C, *shape) of sum_b weight*loss_b.
        """

    def evaluate(self, params: Params) -> dict[str, float]:
        """Problem-specific metrics of an unbatched model (besides train_loss)."""
        return {}

    # ---- provided ---------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return self.train.num_clients

    def subset(self, rows) -> "Problem":
        """The same problem restricted to some training clients (for a Ray actor's shard)."""
        import copy

        out = copy.copy(self)
        out.train = self.train.take(rows)
        out.val = None
        return out

    def with_lam(self, lam) -> "Problem":
        """The same problem (the same data, shared, not copied) with regularizer weight `lam`
        on every penalized block of `psi` (and in `info["lam"]` where the metrics read it): a
        number, or one per row of a stack (a fused group's configurations, fco_ray.core.group).
        Only for problems whose `lam` enters nothing but `psi` (`ProblemParams.fusable_lam`)."""
        import copy

        out = copy.copy(self)
        out.psi = self.psi.with_lam(lam)
        if "lam" in self.info:
            out.info = {**self.info, "lam": lam}
        return out

    def minibatch(self, rows: np.ndarray, key: Key, batch_size: int | None) -> dict[str, np.ndarray]:
        """Samples drawn with replacement from each client's own data (all data if None)."""
        if batch_size is None:
            batch = {k: v[rows] for k, v in self.train.arrays.items()}
            batch["weight"] = self.train.full_weights()[rows]
            return batch
        flat = self.sample_rows(rows, key, batch_size)
        batch = {k: self.train.gather(k, flat) for k in self.train.arrays}
        batch["weight"] = np.full(flat.shape, 1.0 / batch_size)
        return batch

    def sample_rows(self, rows: np.ndarray, key: Key, batch_size: int) -> np.ndarray:
        """(C, B) flat row indices (see `ClientData.gather`) of B samples drawn uniformly with
        replacement from each client's real rows: offset_c + key.integers(size_c)."""
        sizes, offsets = self.row_ranges(rows)
        flat = key.integers(sizes, batch_size)
        flat += offsets[:, None]
        return flat

    def row_ranges(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per client of `rows`: its number of real samples and the flat index of its first."""
        rows = np.asarray(rows)
        return self.train.sizes[rows], rows * self.train.max_samples

    def grad(self, params: Params, rows: np.ndarray, key: Key, batch_size: int | None) -> Params:
        """Stochastic gradient (or operator) of clients `rows` at their stacked `params`."""
        return self.loss_and_grad(params, self.minibatch(rows, key, batch_size))[1]

    def full_loss_grad(self, params: Params, data: ClientData | None = None) -> tuple[float, Params]:
        """F and grad F at an unbatched model over all training clients (uniform client mean)."""
        data = self.train if data is None else data
        batch = dict(data.arrays)
        batch["weight"] = data.full_weights()
        m = data.num_clients
        stacked = {k: np.broadcast_to(v, (m,) + np.shape(v)) for k, v in params.items()}
        loss, grads = self.loss_and_grad(stacked, batch)
        return float(np.sum(loss) / m), {k: np.sum(g, axis=0) / m for k, g in grads.items()}

    def loss(self, params: Params) -> float:
        return self.full_loss_grad(params)[0]

    def objective(self, params: Params) -> float:
        return self.loss(params) + float(self.psi.value(params))

    def metric_names(self) -> list[str]:
        """The names `metrics` reports, for validating a sweep's metric before it runs.
        Default: the metrics of the initial model (override where evaluating is costly)."""
        return list(self.metrics(self.init_params(np.random.default_rng(0))))

    def metrics(self, params: Params) -> dict[str, float]:
        with np.errstate(all="ignore"):
            out = {"train_loss": self.objective(params)}
            out.update(self.evaluate(params))
        return out

    def metrics_stack(self, stacked: Params, count: int) -> list[dict[str, float]]:
        """`metrics` of `count` models stacked on a leading axis (a fused group's members),
        one dict per model. Default: one by one; a problem whose metrics are passes over its
        data overrides this with one pass for all of them."""
        return [self.metrics({k: v[g] if np.ndim(v) else v for k, v in stacked.items()})
                for g in range(count)]
