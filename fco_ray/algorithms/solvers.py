"""Deterministic reference solvers on the pooled training data (the "optimum")."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ops.tree import Params, axpy, copy, sub
from ..problems.base import Problem


@dataclass
class FistaState:
    x: Params
    y: Params
    t: float
    step: float


def _sqnorm(tree: Params) -> float:
    return float(sum(np.vdot(v, v) for v in tree.values()))


def fista_step(problem: Problem, s: FistaState, backtrack: float = 0.5) -> FistaState:
    """One accelerated proximal-gradient step with backtracking (Beck & Teboulle 2009)."""
    fy, gy = problem.full_loss_grad(s.y)
    step = s.step
    while True:
        x_new = problem.psi.prox(axpy(-step, gy, s.y), step)
        d = sub(x_new, s.y)
        bound = fy + sum(float(np.vdot(gy[k], d[k])) for k in d) + _sqnorm(d) / (2 * step)
        if problem.loss(x_new) <= bound + 1e-12 * (1 + abs(fy)) or step < 1e-14:
            break
        step *= backtrack
    t_new = (1 + np.sqrt(1 + 4 * s.t**2)) / 2
    momentum = (s.t - 1) / t_new
    # adaptive restart (O'Donoghue & Candes): drop momentum when the objective goes up
    if problem.objective(x_new) > problem.objective(s.x):
        return FistaState(x_new, copy(x_new), 1.0, step)
    y_new = axpy(momentum, sub(x_new, s.x), x_new)
    return FistaState(x_new, y_new, t_new, step)


def initial_step(problem: Problem, params: Params, seed: int = 0) -> float:
    """1 / L for a finite-difference estimate L of the gradient's Lipschitz constant (a lower
    bound, so twice it is taken; backtracking shrinks the step further when needed)."""
    rng = np.random.default_rng(seed)
    d = {k: rng.standard_normal(np.shape(v)) * 1e-3 * (1 + np.linalg.norm(v)) for k, v in params.items()}
    g0 = problem.full_loss_grad(params)[1]
    g1 = problem.full_loss_grad(axpy(1.0, d, params))[1]
    lip = np.sqrt(_sqnorm(sub(g1, g0)) / max(_sqnorm(d), 1e-300))
    return 1.0 / max(2 * lip, 1e-12)


def solve_centralized(problem: Problem, params0: Params | None = None, *, max_iter: int = 5000,
                      tol: float = 1e-10) -> Params:
    """Minimize F + psi on all training clients to high accuracy (FISTA, backtracking, restart).

    Stops when the relative change of the iterate falls below `tol` for 5 iterations.
    """
    x = copy(params0) if params0 is not None else problem.init_params(np.random.default_rng(0))
    s = FistaState(x, copy(x), 1.0, initial_step(problem, x))
    calm = 0
    for _ in range(max_iter):
        prev = s.x
        s = fista_step(problem, s)
        change = np.sqrt(_sqnorm(sub(s.x, prev))) / (1 + np.sqrt(_sqnorm(s.x)))
        calm = calm + 1 if change < tol else 0
        if calm >= 5:
            break
    return s.x
