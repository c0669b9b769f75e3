"""The dense problems' metrics as rules: one member's metrics computed on the device, inside
the compiled rounds (`fco_ray.rules.rounds`), the numbers of the host's `Problem.metrics`
(tests/engine/test_device_metrics.py: 1e-9 relative).

`metric_rule(problem)` is the problem's `MetricRule`, or None where its metrics stay on the
host (a problem class without one here, or a subclass, which may compute its own):

- `LinearRegression` (E1 lasso, E2 lowrank): train_loss (the regularized objective), val_mse,
  and the support's density / precision / recall / F1 (a vector w) or rank / recovery_error
  (a matrix w);
- `BilinearSaddle` (E5 l1 and nuclear): train_loss = phi(x, y), the closed-form duality gap,
  density (x and y; density_x, density_y) and, for matrices, rank and rank_y;
- `UniversalAdversarial` (E6): train_loss = phi(W, delta), density of delta, val_accuracy and
  attacked_val_accuracy.

A rule holds no arrays: `arrays()` gives the data its metrics read (put on the device once),
and `__call__(data, params, lam)` returns one member's metrics as a vector in the order of
`names` (the host's row order); `lam` is the member's psi weight (a fused group's own lam).
"""
from __future__ import annotations

import abc

import numpy as np

import jax
import jax.numpy as jnp

from ..ops.regularizers import FEASIBILITY_TOL


def _singular_values(x):
    return jnp.linalg.svd(x, compute_uv=False)


_NORMS = {  # `fco_ray.ops.regularizers._NORMS` for one block
    "l1": lambda x: jnp.sum(jnp.abs(x)),
    "l2": lambda x: jnp.sqrt(jnp.sum(x * x)),
    "linf": lambda x: jnp.max(jnp.abs(x), initial=0.0),
    "nuclear": lambda x: jnp.sum(_singular_values(x)),
    "spectral": lambda x: jnp.max(_singular_values(x), initial=0.0),
}


def _fraction(mask):
    """The fraction of True entries, in float64 (a mean of booleans is float32 in JAX)."""
    return jnp.mean(mask.astype(jnp.float64))


def psi_value(psi, params: dict, lam, blocks=None):
    """`Blockwise.value` of one model over `blocks` (None: all) with every penalty weighted by
    `lam`: inf where a block violates its constraint (up to FEASIBILITY_TOL)."""
    total = jnp.float64(0.0)
    for name, reg in psi.regs.items():
        if blocks is not None and name not in blocks:
            continue
        x = params[name]
        if reg.penalty is not None:
            total = total + lam * _NORMS[reg.penalty](x)
        if reg.constraint is not None:
            norm = _NORMS[reg.constraint](x)
            total = total + jnp.where(norm <= reg.radius + FEASIBILITY_TOL * (1.0 + reg.radius), 0.0, jnp.inf)
    return total


def supported(psi) -> bool:
    return all(reg.penalty in (None, *_NORMS) and reg.constraint in (None, *_NORMS)
               for reg in psi.regs.values())


class MetricRule(abc.ABC):
    """A problem's metrics of one model, in JAX: `values` by name, stacked in `names`' order."""

    names: tuple[str, ...] = ()

    def arrays(self) -> dict:
        return {}

    def __call__(self, data, params, lam):
        values = self.values(data, params, lam)
        return jnp.stack([jnp.asarray(values[n], jnp.float64) for n in self.names])

    @abc.abstractmethod
    def values(self, data, params, lam) -> dict:
        """{metric name: value} of one model (`params`) with psi's weight `lam`."""


def _mse(data, prefix: str, w, b):
    """`LinearRegression.mse` of one model on the flat padded rows `prefix`_x, _y, _weight."""
    resid = data[prefix + "x"] @ w.reshape(-1) + b - data[prefix + "y"]
    return jnp.sum(data[prefix + "weight"] * resid ** 2) / data[prefix + "clients"]


class LinearMetrics(MetricRule):
    """`LinearRegression.metrics` (E1, E2)."""

    def __init__(self, problem):
        from ..problems.linear import NONZERO, RANK_TOL

        self.problem, self.nonzero, self.rank_tol = problem, NONZERO, RANK_TOL
        self.vector = len(problem.shapes["w"]) == 1
        self.truth = problem.info.get("w_true")
        names = ["train_loss"] + (["val_mse"] if problem.val is not None else [])
        if self.vector:
            names += ["density"] + (["precision", "recall", "f1"] if self.truth is not None else [])
        else:
            names += ["rank"] + (["recovery_error"] if self.truth is not None else [])
        self.names = tuple(names)

    def arrays(self) -> dict:
        out = {}
        sets = [("train_", self.problem.train)] + ([("val_", self.problem.val)] if self.problem.val is not None else [])
        width = int(np.prod(self.problem.shapes["w"]))
        for prefix, data in sets:
            out[prefix + "x"] = np.asarray(data.arrays["x"], float).reshape(-1, width)
            out[prefix + "y"] = np.asarray(data.arrays["y"], float).reshape(-1)
            out[prefix + "weight"] = np.asarray(data.full_weights(), float).reshape(-1)
            out[prefix + "clients"] = np.float64(data.num_clients)
        if self.truth is not None:
            out["w_true"] = np.asarray(self.truth, float)
        return out

    def values(self, data, params, lam) -> dict:
        w, b = params["w"], params["b"]
        out = {"train_loss": _mse(data, "train_", w, b) + psi_value(self.problem.psi, params, lam)}
        if "val_mse" in self.names:
            out["val_mse"] = _mse(data, "val_", w, b)
        if self.vector:
            found = jnp.abs(w) > self.nonzero
            out["density"] = _fraction(found)
            if self.truth is not None:
                true = data["w_true"] != 0
                tp = jnp.sum(found & true).astype(jnp.float64)
                count = jnp.sum(found)
                precision = jnp.where(count > 0, tp / jnp.maximum(count, 1), 0.0)
                recall = tp / int(np.sum(self.truth != 0)) if np.any(self.truth != 0) else jnp.float64(1.0)
                both = precision + recall
                out.update(precision=precision, recall=recall,
                           f1=jnp.where(both > 0, 2 * precision * recall / jnp.where(both > 0, both, 1.0), 0.0))
        else:
            out["rank"] = jnp.sum(_singular_values(w) > self.rank_tol)
            if self.truth is not None:
                out["recovery_error"] = jnp.sqrt(jnp.sum((w - data["w_true"]) ** 2))
        return out


def _spectrum(v):
    """|v| for vectors, singular values for matrices (`saddle._spectrum`)."""
    return jnp.abs(v) if v.ndim == 1 else _singular_values(v)


class BilinearMetrics(MetricRule):
    """`BilinearSaddle.metrics` (E5 l1 and nuclear)."""

    def __init__(self, problem):
        from ..problems.saddle import ZERO_TOL

        self.problem, self.zero_tol = problem, ZERO_TOL
        self.radius = float(problem.info["radius"])
        self.matrix = len(problem.shapes["x"]) == 2
        self.names = ("train_loss", "duality_gap", "density", "density_x", "density_y") + \
            (("rank", "rank_y") if self.matrix else ())

    def arrays(self) -> dict:
        return {"a": np.asarray(self.problem.info["A"], float), "b": np.asarray(self.problem.info["b"], float)}

    def values(self, data, params, lam) -> dict:
        a, b, x, y = data["a"], data["b"], params["x"], params["y"]
        psi = self.problem.psi
        p1 = psi_value(psi, params, lam, [k for k in params if k not in self.problem.max_blocks])
        p2 = psi_value(psi, params, lam, self.problem.max_blocks)
        feasible = jnp.isfinite(p1) & jnp.isfinite(p2)
        resid, back = a @ x - b, a.T @ y
        loss = jnp.sum(resid * y)
        d = self.radius
        gap = (d * jnp.sum(jnp.maximum(_spectrum(resid) - lam, 0.0)) + lam * jnp.sum(_spectrum(x))
               + d * jnp.sum(jnp.maximum(_spectrum(back) - lam, 0.0)) + jnp.sum(b * y)
               + lam * jnp.sum(_spectrum(y)))
        nonzero_x, nonzero_y = jnp.abs(x) >= self.zero_tol, jnp.abs(y) >= self.zero_tol
        out = {"train_loss": jnp.where(feasible, loss + p1 - p2, jnp.inf),
               "duality_gap": jnp.where(feasible, gap, jnp.inf),
               "density": (jnp.sum(nonzero_x) + jnp.sum(nonzero_y)) / (x.size + y.size),
               "density_x": _fraction(nonzero_x), "density_y": _fraction(nonzero_y)}
        if self.matrix:
            out["rank"] = jnp.sum(_spectrum(x) >= self.zero_tol)
            out["rank_y"] = jnp.sum(_spectrum(y) >= self.zero_tol)
        return out


class AdversarialMetrics(MetricRule):
    """`UniversalAdversarial.metrics` (E6)."""

    def __init__(self, problem):
        from ..problems.saddle import ZERO_TOL

        self.problem, self.zero_tol = problem, ZERO_TOL
        self.names = ("train_loss", "density") + \
            (("val_accuracy", "attacked_val_accuracy") if problem.val is not None else ())

    def arrays(self) -> dict:
        train = self.problem.train
        x = np.asarray(train.arrays["x"], float)
        out = {"train_x": x.reshape(-1, x.shape[-1]), "train_y": np.asarray(train.arrays["y"]).reshape(-1).astype(np.int64),
               "train_weight": np.asarray(train.full_weights(), float).reshape(-1),
               "train_clients": np.float64(train.num_clients)}
        if self.problem.val is not None:
            pooled = self.problem.val.pooled()
            out.update(val_x=np.asarray(pooled["x"], float), val_y=np.asarray(pooled["y"]).astype(np.int64))
        return out

    def _logits(self, params, x):
        logits = x @ params["W"]
        return logits + params["b"] if "b" in params else logits

    def values(self, data, params, lam) -> dict:
        delta = params["delta"]
        logp = jax.nn.log_softmax(self._logits(params, data["train_x"] + delta), axis=-1)
        picked = jnp.take_along_axis(logp, data["train_y"][:, None], axis=-1)[:, 0]
        loss = -jnp.sum(data["train_weight"] * picked) / data["train_clients"]
        psi, maxb = self.problem.psi, self.problem.max_blocks
        p1 = psi_value(psi, params, lam, [k for k in params if k not in maxb])
        p2 = psi_value(psi, params, lam, maxb)
        out = {"train_loss": jnp.where(jnp.isfinite(p1) & jnp.isfinite(p2), loss + p1 - p2, jnp.inf),
               "density": _fraction(jnp.abs(delta) >= self.zero_tol)}
        if self.problem.val is not None:
            x, y = data["val_x"], data["val_y"]
            out["val_accuracy"] = _fraction(jnp.argmax(self._logits(params, x), axis=-1) == y)
            out["attacked_val_accuracy"] = _fraction(jnp.argmax(self._logits(params, x + delta), axis=-1) == y)
        return out


def metric_rule(problem) -> MetricRule | None:
    """The device metrics of `problem` (module docstring), or None: its metrics stay on the host."""
    from ..problems.adversarial import UniversalAdversarial
    from ..problems.linear import LinearRegression
    from ..problems.saddle import BilinearSaddle

    kinds = {LinearRegression: LinearMetrics, BilinearSaddle: BilinearMetrics,
             UniversalAdversarial: AdversarialMetrics}
    make = kinds.get(type(problem))  # a subclass may compute its metrics otherwise: the host's
    if make is None or not supported(problem.psi):
        return None
    if make is LinearMetrics and (set(problem.shapes) != {"w", "b"} or problem.shapes["b"] != ()):
        return None
    return make(problem)
