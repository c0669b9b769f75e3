"""Federated composite saddle point methods (Bai & Bullins, ICLR'24): FeDualEx, FedMiP,
Extra-step local SGD and federated projected gradient descent-ascent (PGDA).

They act on z = (x, y) through the problem's operator g(z) = (grad_x f, -grad_y f)
(`problem.grad`) and psi(z) = psi1(x) + psi2(y) (`problem.psi`, blockwise), with the
Euclidean distance-generating function l(z) = 1/2 ||z||^2. FedDualAvg and FedMiD of
`composite.py` run unchanged on the same operator (one operator call per local step).

The two operator calls of an extra-step update use the stream tags NOISE and NOISE2, so
their noises / minibatches are independent draws (g(z; xi), g(z_half; xi')).

Sequential FeDualEx is FeDualEx with one client (problem `clients: 1`, server_lr 1: then
t_{r,K} = t_{r+1,0} and the rounds chain into one run of stochastic dual extrapolation);
deterministic FeDualEx is FeDualEx on a problem without noise (`noise: 0`).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from ..ops.random import NOISE, NOISE2, Key
from ..ops.tree import Params, axpy, copy, per_row, stack, sub, tmap
from ..problems.base import Problem
from .base import Algorithm, FederatedHyper, State


class SaddleHyper(FederatedHyper):
    ergodic: bool = Field(
        True, description="also report the ergodic average (metrics suffixed _ergodic): "
        "FeDualEx uploads each local step's dual (floats_up x (1 + K)), the primal methods "
        "each client's sum of z_half (floats_up x 2)")


class _Ergodic:
    """Running ergodic mean of shadow points over all rounds and local steps,
    zhat_R = (1 / (R K)) sum_r sum_k zhat_{r,k+1/2}.

    The server adds up one shadow point per local step (`ergodic_update` gets their sum over
    the round's K steps) and divides by the number of steps so far. What a shadow point is
    depends on the method: for the primal methods (FedMiP, Extra-step local SGD, PGDA) it is
    the client mean of the local points z^m_{r,k+1/2}, so clients can send their sums over k
    (`ergodic_message`); FeDualEx's is the prox of the clients' averaged dual (see FeDualEx).
    """

    hp: SaddleHyper

    def ergodic_init(self, params0: Params) -> State:
        return {"zsum": tmap(np.zeros_like, params0), "steps": 0, "z0": copy(params0)}

    def ergodic_update(self, state: State, zsum_round: Params) -> dict:
        """The round's sum over its K local steps of the shadow points."""
        if not self.hp.ergodic:
            return {}
        zsum = {k: state["zsum"][k] + zsum_round[k] for k in state["zsum"]}
        return {"zsum": zsum, "steps": state["steps"] + self.hp.local_steps}

    def extra_outputs(self, problem: Problem, state: State) -> dict[str, Params]:
        if not self.hp.ergodic:
            return {}
        if state["steps"] == 0:
            return {"ergodic": state["z0"]}
        return {"ergodic": tmap(lambda s: s / state["steps"], state["zsum"])}

    def extra_output_names(self) -> list[str]:
        return ["ergodic"] if self.hp.ergodic else []

    def ergodic_message(self, zsum: Params) -> dict:
        return {"zhalf_" + k: v for k, v in zsum.items()} if self.hp.ergodic else {}

    def client_zsum(self, mean: dict) -> Params:
        """The client mean of sum_k z^m_{r,k+1/2}, from the aggregated messages."""
        return {k[len("zhalf_"):]: v for k, v in mean.items() if k.startswith("zhalf_")}


def _step_of(stacked: np.ndarray, k: int, like: np.ndarray, block_ndim: int) -> np.ndarray:
    """Local step k of an aggregated (..., K, *block) message whose other leading axes are
    those of `like` (none, or the member axis of a fused run)."""
    return np.take(stacked, k, axis=like.ndim - block_ndim)


def _sub_into(out: Params, x: Params, y: Params) -> Params:
    """x - y, written into `out` (the same floats as `tree.sub`)."""
    for b in out:
        np.subtract(x[b], y[b], out=out[b])
    return out


def _axpy_into(out: Params, a, x: Params, y: Params, scratch: Params | None = None) -> Params:
    """a * x + y (`tree.axpy`'s floats), written into `out`; `a` a number or one per row.
    `out` may be `y` itself when a separate `scratch` holds a * x."""
    for b in out:
        ax = np.multiply(per_row(a, x[b].ndim), x[b], out=(scratch or out)[b])
        np.add(ax, y[b], out=out[b])
    return out


class FeDualEx(_Ergodic, Algorithm):
    """Federated dual extrapolation (Algorithm 1). With P_t(v) = prox_{eta_c t psi}(v):

    client, k = 0..K-1, t = eta_s r K + k:
        z_k      = P_t(sbar - s_k)
        z_half   = P_{t+1}(sbar - s_k - eta_c g(z_k; xi))
        s_{k+1}  = s_k + eta_c g(z_half; xi')
    server: s_{r+1} = s_r + eta_s mean_m (s^m_K - s_r);  output z_{r+1} = P_{eta_s (r+1) K}(sbar - s_{r+1}).

    sbar = z_0 (so the first primal is z_0, projected) and s_0 = 0. The broadcast carries
    v_r = sbar - s_r (one array instead of both); clients keep their local offset u = s_k - s_r.

    Ergodic output (what Algorithm 1 returns and its theorem bounds): the running mean over
    r, k of the server's shadow point, the prox of the clients' *averaged* dual,
        zhat_{r,k+1/2} = P_{t+1}(sbar - s_r - mean_m (u^m_k + eta_c g_m(z^m_k; xi))),
    not the mean of the clients' z^m_{r,k+1/2} (the prox is not linear). Each client uploads
    its half-step dual offsets u_k + eta_c g(z_k) for k = 0..K-1 (K arrays); the server averages
    them over clients and applies the K proxes.
    """

    name = "feddualex"
    Hyper = SaddleHyper
    supports = frozenset({"saddle"})
    fusable = True
    rule = "fco_ray.rules.algorithms:FeDualEx"

    def server_init(self, problem, params0):
        return {"s": tmap(np.zeros_like, params0), "sbar": copy(params0), "t": 0.0,
                **self.ergodic_init(params0)}

    def broadcast(self, state):
        return {"v": sub(state["sbar"], state["s"]), "t": state["t"]}

    def client_update(self, problem: Problem, payload, rows, key: Key):
        lr, psi, steps = self.hp.client_lr, problem.psi, self.hp.local_steps
        v = stack(payload["v"], len(rows))
        u = tmap(np.zeros_like, v)  # s_k - s_r
        scratch = tmap(np.empty_like, v)
        # (C, K, ...) per block: step k's half-step dual offset u_k + eta_c g(z_k) of every
        # client, written in place (the upload; without ergodic output one step's buffer)
        dual = {b: np.empty((len(rows), steps if self.hp.ergodic else 1) + x.shape[1:])
                for b, x in v.items()}
        for k in range(steps):
            t = payload["t"] + k
            z = psi.prox(_sub_into(scratch, v, u), lr * t)  # anchor sbar - s_k
            g = problem.grad(z, rows, key.with_step(k, NOISE), self.hp.batch_size)
            half = _axpy_into({b: d[:, k if self.hp.ergodic else 0] for b, d in dual.items()}, lr, g, u)
            z_half = psi.prox(_sub_into(scratch, v, half), lr * (t + 1))
            g_half = problem.grad(z_half, rows, key.with_step(k, NOISE2), self.hp.batch_size)
            _axpy_into(u, lr, g_half, u, scratch)
        return {**u, **({"halfdual_" + b: d for b, d in dual.items()} if self.hp.ergodic else {})}

    def server_update(self, problem, state, mean, rnd):
        zsum = {}
        if self.hp.ergodic:  # shadow points P_{t+1}(sbar - s_r - mean_m half^m_k), k = 0..K-1
            v = sub(state["sbar"], state["s"])
            for k in range(self.hp.local_steps):
                half = {b: _step_of(mean["halfdual_" + b], k, v[b], len(problem.shapes[b]))
                        for b in v}
                shadow = problem.psi.prox(sub(v, half), self.hp.client_lr * (state["t"] + k + 1))
                zsum = shadow if k == 0 else axpy(1.0, shadow, zsum)
        s = axpy(self.hp.server_lr, {k: mean[k] for k in state["s"]}, state["s"])
        t = state["t"] + self.hp.server_lr * self.hp.local_steps
        return {**state, "s": s, "t": t, **self.ergodic_update(state, zsum)}

    def output(self, problem, state):
        return problem.psi.prox(sub(state["sbar"], state["s"]), self.hp.client_lr * state["t"])


class PrimalSaddle(_Ergodic, Algorithm):
    """Clients run K local steps on z; the server averages the model deltas.

    `extra`: two operator calls per step (extragradient), else one (gradient descent-ascent).
    `prox`: steps are z' = prox_{eta_c psi}(z - eta_c g) (mirror steps);
    else z' = Proj(z - eta_c (g + s)), s a subgradient of the penalty part of psi at the point
    where g is taken, Proj the projection onto the constraint set.
    Server: z_{r+1} = prox_{eta_s eta_c K psi}(z_r + eta_s Delta_r) with `prox` [ref], else
    Proj(z_r + eta_s Delta_r) (a no-op for eta_s <= 1: the mean of feasible points is feasible).
    """

    extra: ClassVar[bool]
    prox: ClassVar[bool]
    Hyper = SaddleHyper
    supports = frozenset({"saddle"})
    fusable = True
    rule = "fco_ray.rules.algorithms:PrimalSaddle"

    def server_init(self, problem, params0):
        return {"z": copy(params0), **self.ergodic_init(params0)}

    def broadcast(self, state):
        return {"z": state["z"]}

    def _step(self, problem: Problem, z: Params, g: Params, at: Params) -> Params:
        """One local step from z along g; `at` is where the subgradient of psi is taken
        (the point of the operator call: z for a predictor, z_half for a corrector)."""
        lr, psi = self.hp.client_lr, problem.psi
        if self.prox:
            return psi.prox(axpy(-lr, g, z), lr)
        return psi.project(axpy(-lr, axpy(1.0, psi.subgradient(at), g), z))

    def client_update(self, problem: Problem, payload, rows, key: Key):
        z = stack(payload["z"], len(rows))
        zsum = tmap(np.zeros_like, z)
        for k in range(self.hp.local_steps):
            g = problem.grad(z, rows, key.with_step(k, NOISE), self.hp.batch_size)
            z_half = self._step(problem, z, g, at=z)
            if self.extra:
                g_half = problem.grad(z_half, rows, key.with_step(k, NOISE2), self.hp.batch_size)
                z = self._step(problem, z, g_half, at=z_half)
            else:
                z = z_half
            for b in zsum:  # in place: the floats of axpy(1.0, z_half, zsum)
                zsum[b] += z_half[b]
        return {**sub(z, payload["z"]), **self.ergodic_message(zsum)}

    def server_update(self, problem, state, mean, rnd):
        z = axpy(self.hp.server_lr, {k: mean[k] for k in state["z"]}, state["z"])
        if self.prox:
            z = problem.psi.prox(z, self.hp.server_lr * self.hp.client_lr * self.hp.local_steps)
        else:
            z = problem.psi.project(z)
        return {**state, "z": z, **self.ergodic_update(state, self.client_zsum(mean))}

    def output(self, problem, state):
        return state["z"]


class FedMiPHyper(SaddleHyper):
    server_prox: bool = Field(
        True, description="server step prox_{eta_s eta_c K psi} (Appendix H); false: only the "
        "projection onto the constraints (no second shrinkage of the clients' proximal iterates)")


class FedMiP(PrimalSaddle):
    """Federated mirror prox (Appendix H): z_half = prox_{eta_c psi}(z - eta_c g(z)),
    z <- prox_{eta_c psi}(z - eta_c g(z_half)); server prox_{eta_s eta_c K psi}(z + eta_s Delta).

    The server prox shrinks iterates the clients have already shrunk K times: for K = 1,
    eta_s = 1 and an interior coordinate, z = z - eta_c (g + lam) - eta_c lam, so the fixed
    points solve the problem with about twice the penalty. `server_prox: false` replaces it by
    the projection onto the constraint set (the clients' proximal steps alone carry psi).
    """

    name, extra, prox = "fedmip", True, True
    Hyper = FedMiPHyper
    rule = PrimalSaddle.rule  # the rule reads hp.server_prox

    def server_update(self, problem, state, mean, rnd):
        if self.hp.server_prox:
            return super().server_update(problem, state, mean, rnd)
        z = problem.psi.project(axpy(self.hp.server_lr, {k: mean[k] for k in state["z"]}, state["z"]))
        return {**state, "z": z, **self.ergodic_update(state, self.client_zsum(mean))}


class ExtragradLocalSGD(PrimalSaddle):
    """Extra-step local SGD (Beznosikov et al. 2020) with subgradients and projection:
    z_half = Proj(z - eta_c (g(z) + s(z))), z <- Proj(z - eta_c (g(z_half) + s(z_half)));
    plain averaging on the server."""

    name, extra, prox = "extragrad_local_sgd", True, False


class PGDA(PrimalSaddle):
    """Federated projected gradient descent-ascent: z <- Proj(z - eta_c (g(z) + s(z)))
    (descent in x, ascent in y through the operator's sign); plain averaging on the server.
    Its `ergodic` output is the running mean of the local iterates."""

    name, extra, prox = "pgda", False, False
