"""Composite saddle problems (Bai & Bullins, ICLR'24): the bilinear benchmarks of E5.

A composite saddle problem is  min_x max_y phi(x, y) = f(x, y) + psi1(x) - psi2(y),
f = (1/M) sum_m f_m. Its parameters are a dict of blocks; the blocks in `max_blocks` form
y, the others x, and `psi` (a `Blockwise`) holds psi1 on the x-blocks and psi2 on the
y-blocks, so `psi(z) = psi1(x) + psi2(y)`. The saddle algorithms see only

    problem.grad(z)  = the operator g(z) = (grad_x f_m(z), -grad_y f_m(z)) of each client,
    problem.psi      = psi(z),

so proximal steps and subgradients of psi act on both players at once.

The two bilinear problems of E5 (A, b / B shared by all clients; clients differ only by
the gradient noise N(0, noise^2) added to every operator call):

    l1:      phi = <A x - b, y> + lam ||x||_1 - lam ||y||_1,  ||x||_inf, ||y||_inf <= D,
             A (n x m), x in R^m, y in R^n;
    nuclear: phi = Tr((A X - B)^T Y) + lam ||X||_* - lam ||Y||_*,  ||X||_2, ||Y||_2 <= D,
             A (n x m), X (m x p), Y and B (n x p).

Both are one formula with "spectrum" sp(v) = |v| (entries) for vectors and the singular
values for matrices: max_{y'} (<r, y'> - lam ||y'||) over the ball of radius D equals
D sum_i (sp_i(r) - lam)_+ (von Neumann's trace inequality for matrices), so

    Gap(x, y) = max_y' phi(x, y') - min_x' phi(x', y)
              = D sum (sp(A x - b) - lam)_+ + lam ||x|| + D sum (sp(A^T y) - lam)_+ + <b, y> + lam ||y||

for feasible (x, y); it is >= 0 and zero exactly at a saddle point (inf if infeasible).

Client data: the bilinear problems have no per-client samples. `train` is a dummy
`ClientData` with one zero row per client (the `Problem` interface and the Ray backend's
sharding need a client axis); all per-client randomness is the operator noise, drawn from
the key of each call (the algorithms give the two operator calls of an extra-step update
different stream tags, so their noises are independent).
"""
from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ..data.stores import ClientData
from ..ops import regularizers as R
from ..ops.random import Key
from ..ops.tree import Params
from .base import Problem
from .registry import ProblemParams, register_problem

ZERO_TOL = 1e-5  # |v| below this counts as zero for `density` and singular values for `rank` (E5)


def feasible_value(psi: R.Blockwise, params: Params, blocks) -> float:
    """sum of psi over `blocks`; inf if a block violates its constraint."""
    total = 0.0
    for name in blocks:
        if name in psi.regs:
            total += float(psi.regs[name].value(params[name], len(psi.shapes[name])))
    return total


class SaddleProblem(Problem):
    """A composite saddle problem: f and its gradient come from `loss_and_grad` (as for a
    minimization problem); `grad` returns the operator, `objective` is phi(x, y)."""

    kinds = frozenset({"saddle"})

    max_blocks: ClassVar[tuple[str, ...]] = ("y",)

    def to_operator(self, grads: Params) -> Params:
        """(grad_x f, grad_y f) -> (grad_x f, -grad_y f)."""
        return {k: -g if k in self.max_blocks else g for k, g in grads.items()}

    def grad(self, params: Params, rows: np.ndarray, key: Key, batch_size: int | None) -> Params:
        return self.to_operator(super().grad(params, rows, key, batch_size))

    def psi_parts(self, params: Params) -> tuple[float, float]:
        """(psi1(x), psi2(y)), each inf where infeasible."""
        x_blocks = [k for k in params if k not in self.max_blocks]
        return (feasible_value(self.psi, params, x_blocks),
                feasible_value(self.psi, params, self.max_blocks))

    def objective(self, params: Params) -> float:
        """phi(x, y) = f + psi1(x) - psi2(y); inf when x or y is infeasible (never -inf, so
        the engine's divergence check sees it)."""
        p1, p2 = self.psi_parts(params)
        if not (np.isfinite(p1) and np.isfinite(p2)):
            return float("inf")
        return self.loss(params) + p1 - p2


def _spectrum(v: np.ndarray) -> np.ndarray:
    """|v| for vectors, singular values for matrices."""
    return np.abs(v) if v.ndim == 1 else np.linalg.svd(v, compute_uv=False)


def _apply(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A v for a stack of vectors (C, m) or matrices (C, m, p)."""
    return v @ a.T if v.ndim == 2 else np.matmul(a, v)


def _apply_t(a: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A^T v for a stack of vectors (C, n) or matrices (C, n, p)."""
    return v @ a if v.ndim == 2 else np.matmul(a.T, v)


class BilinearSaddle(SaddleProblem):
    """phi = <A x - b, y> + psi1(x) - psi2(y) with x, y vectors (l1) or matrices (nuclear).

    `info` holds A (n x m), b ((n,) or (n, p)), lam, radius (D) and noise (sigma).
    """

    #: its rule: the operator (A^T y, b - A x) plus N(0, noise^2) per entry, per client, per
    #: call (fco_ray.rules.problems.Bilinear); its NumPy methods give the metrics
    rule = "fco_ray.rules.problems:bilinear"

    @property
    def a(self) -> np.ndarray:
        return self.info["A"]

    @property
    def b(self) -> np.ndarray:
        return self.info["b"]

    def init_params(self, rng: np.random.Generator) -> Params:
        """x, y ~ U[-init_scale, init_scale] entrywise, then projected onto the constraint
        sets (a no-op for the l1 box with init_scale = D; for the nuclear problem the paper
        draws U[-1, 1], far outside the spectral ball, and the projection makes the first
        point feasible so that every method starts from the same feasible z_0)."""
        s = self.info["init_scale"]
        z = {k: rng.uniform(-s, s, size=shape) for k, shape in self.shapes.items()}
        return self.psi.project(z)

    def _stacked(self, params: Params, c: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.broadcast_to(params["x"], (c,) + self.shapes["x"])
        y = np.broadcast_to(params["y"], (c,) + self.shapes["y"])
        return x, y

    def loss_and_grad(self, params: Params, batch):
        """f = <A x - b, y> and its gradient (A^T y, A x - b) for each of the C clients."""
        x, y = self._stacked(params, batch["weight"].shape[0])
        resid = _apply(self.a, x) - self.b
        loss = np.sum((resid * y).reshape(len(y), -1), axis=1)
        return loss, {"x": _apply_t(self.a, y), "y": resid}

    def loss(self, params: Params) -> float:
        """f(x, y) = <A x - b, y> (the same for every client, computed once)."""
        return float(np.sum((self.a @ params["x"] - self.b) * params["y"]))

    def duality_gap(self, params: Params) -> float:
        """Closed-form Gap(x, y) (module docstring); inf if x or y is infeasible."""
        x, y = np.asarray(params["x"]), np.asarray(params["y"])
        if not all(np.isfinite(self.psi_parts(params))):
            return float("inf")
        lam, d = self.info["lam"], self.info["radius"]
        resid, back = self.a @ x - self.b, self.a.T @ y
        return float(d * np.sum(np.maximum(_spectrum(resid) - lam, 0.0))
                     + lam * np.sum(_spectrum(x))
                     + d * np.sum(np.maximum(_spectrum(back) - lam, 0.0))
                     + np.sum(self.b * y)
                     + lam * np.sum(_spectrum(y)))

    def metrics(self, params: Params) -> dict[str, float]:
        """train_loss = phi(x, y), duality_gap, density (over x and y; also density_x,
        density_y) and, for matrix blocks, rank = rank(X) and rank_y = rank(Y)."""
        with np.errstate(all="ignore"):
            x, y = np.asarray(params["x"]), np.asarray(params["y"])
            nonzero_x, nonzero_y = np.abs(x) >= ZERO_TOL, np.abs(y) >= ZERO_TOL
            out = {
                "train_loss": self.objective(params),
                "duality_gap": self.duality_gap(params),
                "density": float((nonzero_x.sum() + nonzero_y.sum()) / (x.size + y.size)),
                "density_x": float(nonzero_x.mean()),
                "density_y": float(nonzero_y.mean()),
            }
            if x.ndim == 2:
                out["rank"] = float(np.sum(_spectrum(x) >= ZERO_TOL))
                out["rank_y"] = float(np.sum(_spectrum(y) >= ZERO_TOL))
        return out


def _dummy_clients(clients: int) -> ClientData:
    return ClientData({"none": np.zeros((clients, 1))}, np.ones(clients, dtype=np.int64))


def make_bilinear_l1(*, seed: int, n: int, m: int, lam: float, radius: float, clients: int,
                     noise: float) -> BilinearSaddle:
    """E5 l1 problem: A (n x m), b (n) with entries U[-1, 1]; x, y start U[-D, D]."""
    rng = np.random.default_rng([seed, 0xB111])
    a = rng.uniform(-1.0, 1.0, size=(n, m))
    b = rng.uniform(-1.0, 1.0, size=n)
    shapes = {"x": (m,), "y": (n,)}
    reg = R.L1Box(lam, radius)
    return BilinearSaddle(
        train=_dummy_clients(clients), val=None, shapes=shapes,
        psi=R.Blockwise({"x": reg, "y": reg}, shapes), name="bilinear_l1",
        info={"A": a, "b": b, "lam": lam, "radius": radius, "noise": noise, "init_scale": radius},
    )


def make_bilinear_nuclear(*, seed: int, n: int, m: int, p: int, rank: int, lam: float,
                          radius: float, clients: int, noise: float) -> BilinearSaddle:
    """E5 nuclear problem: A (n x m) entries U[-1, 1]; B (n x p) of rank `rank`: its first
    `rank` columns U[-1, 1], the others B[:, :rank] C with C ~ U[-1, 1] / sqrt(rank) (so all
    columns have comparable scale); X, Y start U[-1, 1] projected onto the spectral ball."""
    rng = np.random.default_rng([seed, 0xB112])
    a = rng.uniform(-1.0, 1.0, size=(n, m))
    base = rng.uniform(-1.0, 1.0, size=(n, rank))
    mix = rng.uniform(-1.0, 1.0, size=(rank, p - rank)) / np.sqrt(max(rank, 1))
    b = np.concatenate([base, base @ mix], axis=1)
    shapes = {"x": (m, p), "y": (n, p)}
    reg = R.NuclearSpectral(lam, radius)
    return BilinearSaddle(
        train=_dummy_clients(clients), val=None, shapes=shapes,
        psi=R.Blockwise({"x": reg, "y": reg}, shapes), name="bilinear_nuclear",
        info={"A": a, "b": b, "lam": lam, "radius": radius, "noise": noise, "init_scale": 1.0},
    )


# ---- registry entries (this module is imported at the end of problems/__init__.py) ------
class BilinearL1Params(ProblemParams):
    """E5 l1 bilinear saddle problem; defaults: n = 300, m = 600, lam = 0.1, D = 0.05,
    100 clients, gradient noise sigma = 0.1. Sequential FeDualEx: clients = 1; deterministic: noise = 0."""

    problem_class: ClassVar[type[Problem]] = BilinearSaddle

    name: Literal["bilinear_l1"] = "bilinear_l1"
    fusable_lam: ClassVar[bool] = True  # lam weighs psi only (ProblemParams.fusable_lam)
    n: int = Field(300, ge=1, description="rows of A (size of y)")
    m: int = Field(600, ge=1, description="columns of A (size of x)")
    lam: float = Field(0.1, ge=0, allow_inf_nan=False)
    radius: float = Field(0.05, gt=0, allow_inf_nan=False, description="D: ||x||_inf, ||y||_inf <= D")
    clients: int = Field(100, ge=1)
    noise: float = Field(0.1, ge=0, allow_inf_nan=False, description="sigma of the per-call gradient noise")

    def estimated_bytes(self):
        # the shared matrix A, and per client a placeholder row and a size
        return {f"the matrix A (problem.n={self.n} x problem.m={self.m} floats)": 8 * self.n * self.m,
                f"the clients (problem.clients={self.clients} x 16 bytes)": 16 * self.clients}


class BilinearNuclearParams(BilinearL1Params):
    """E5 nuclear bilinear saddle problem; defaults: A 300 x 600, X 600 x 20, Y and B 300 x 20,
    rank(B) = 10, lam = 0.1, D = 0.05 (spectral balls), 100 clients, sigma = 0.1."""

    name: Literal["bilinear_nuclear"] = "bilinear_nuclear"
    p: int = Field(20, ge=1, description="columns of X, Y and B")
    rank: int = Field(10, ge=0, description="rank of B")

    @model_validator(mode="after")
    def _rank_fits(self):
        if self.rank > min(self.p, self.n):
            raise ValueError(f"problem.rank must be <= min(problem.p, problem.n) = "
                             f"{min(self.p, self.n)}, got {self.rank}")
        return self


@register_problem("bilinear_l1", BilinearL1Params)
def _bilinear_l1(p: BilinearL1Params, seed: int) -> BilinearSaddle:
    return make_bilinear_l1(seed=seed, **p.model_dump(exclude={"name", "data_seed"}))


@register_problem("bilinear_nuclear", BilinearNuclearParams)
def _bilinear_nuclear(p: BilinearNuclearParams, seed: int) -> BilinearSaddle:
    return make_bilinear_nuclear(seed=seed, **p.model_dump(exclude={"name", "data_seed"}))
