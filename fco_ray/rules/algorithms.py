"""The algorithms' update rules for ONE member (see `fco_ray.rules`): the one definition of
the composite family (FedAvg, FedAvg with subgradients, FedMiD, FedMiD-OSP, FedDualAvg,
FedDualAvg-OSP, the local baseline; Yuan, Zaheer, Reddi, ICML'21) and the saddle family
(FeDualEx, FedMiP, Extra-step local SGD, PGDA; Bai, Bullins, ICLR'24). The algorithm classes
(`fco_ray.algorithms.composite`, `.saddle`) declare their names, hyperparameters and which
rule they run; every executor runs these rules (`fco_ray.core.group.RuleGroup`).

A rule is built from the group's shared hyperparameters (`hp`: local steps, ergodic output,
...); the values that may differ between members come in `hyper`, a dict of numbers:
`client_lr`, `server_lr`, `lam` (psi's weight) and `seed`.

    init(params0) -> state                              (params0: the initial model)
    broadcast(state) -> payload
    client(problem, data, payload, hyper, client) -> one client's message
    server(problem, state, mean, hyper) -> state       (mean: the weighted client mean)
    output(problem, state, hyper) -> params;  extra_outputs(...) -> {suffix: params}
"""
from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .problems import BATCH, NOISE, NOISE2
from .static import Static


def axpy(a, x: dict, y: dict) -> dict:
    """a * x + y blockwise (`fco_ray.ops.tree.axpy`'s floats)."""
    return {k: a * x[k] + y[k] for k in y}


def sub(x: dict, y: dict) -> dict:
    return {k: x[k] - y[k] for k in x}


class Rule(Static):
    """The rules below hold their algorithm's settings (`hp`, flags): equal settings, equal
    rules, one compiled program (`fco_ray.rules.static`). The real-valued hyperparameters come
    in `hyper`, so they do not count."""

    static_skip = ("hp",)

    def __init__(self, hp, algorithm):
        self.hp, self.steps = hp, hp.local_steps
        self.settings = {f: v for f, v in hp.model_dump().items() if not isinstance(v, float)}

    def extra_outputs(self, problem, state, hyper) -> dict:
        return {}


class PrimalAveraging(Rule):
    """Clients run K steps on the primal model; the server averages the model deltas.
    FedAvg, FedAvg with subgradients, FedMiD, FedMiD-OSP, the local baseline: K steps
    w <- w - lr g (`sgd`), w - lr (g + s(w)) (`subgrad`, s a subgradient of psi at the point
    before the step) or prox_{lr psi}(w - lr g) (`prox`); server w + eta_s Delta, then
    prox_{eta_s eta_c K psi} with `server_prox` (the factor K: Algorithm 2 of the paper, [ref])."""

    def __init__(self, hp, algorithm):
        super().__init__(hp, algorithm)
        self.client_step, self.server_prox = algorithm.client_step, algorithm.server_prox

    def init(self, params0):
        return {"w": dict(params0)}

    def broadcast(self, state):
        return {"w": state["w"]}

    def client(self, problem, data, payload, hyper, client):
        lr, lam = hyper["client_lr"], hyper["lam"]

        def step(k, w):
            g = problem.grad(data, w, client, k, BATCH)
            if self.client_step == "subgrad":
                g = axpy(1.0, problem.subgradient(w, lam), g)
            w = axpy(-lr, g, w)
            return problem.prox(w, lr, lam) if self.client_step == "prox" else w

        return sub(lax.fori_loop(0, self.steps, step, payload["w"]), payload["w"])

    def server(self, problem, state, mean, hyper):
        w = axpy(hyper["server_lr"], mean, state["w"])
        if self.server_prox:
            w = problem.prox(w, hyper["server_lr"] * hyper["client_lr"] * self.steps, hyper["lam"])
        return {"w": w}

    def output(self, problem, state, hyper):
        return state["w"]


class DualAveraging(Rule):
    """FedDualAvg: clients average gradients in the dual; the primal is prox_{etat psi}(z).
    Server state: the dual z (z_0 = grad h(w_0) = w_0) and the accumulated weight etat
    (etat_0 = 0). Client step k: w_k = prox_{(etat + lr k) psi}(z_k) (FedDualAvg-OSP: w_k = z_k),
    z_{k+1} = z_k - lr g(w_k); server z + eta_s Delta, etat + eta_s lr K; output
    prox_{etat psi}(z)."""

    def __init__(self, hp, algorithm):
        super().__init__(hp, algorithm)
        self.client_prox = algorithm.client_prox

    def init(self, params0):
        return {"z": dict(params0), "etat": jnp.zeros(())}

    def broadcast(self, state):
        return {"z": state["z"], "etat": state["etat"]}

    def client(self, problem, data, payload, hyper, client):
        lr, lam, etat = hyper["client_lr"], hyper["lam"], payload["etat"]

        def step(k, z):
            w = problem.prox(z, etat + lr * k, lam) if self.client_prox else z
            return axpy(-lr, problem.grad(data, w, client, k, BATCH), z)

        return sub(lax.fori_loop(0, self.steps, step, payload["z"]), payload["z"])

    def server(self, problem, state, mean, hyper):
        slr, lr = hyper["server_lr"], hyper["client_lr"]
        return {"z": axpy(slr, mean, state["z"]), "etat": state["etat"] + slr * lr * self.steps}

    def output(self, problem, state, hyper):
        return problem.prox(state["z"], state["etat"], hyper["lam"])


class Ergodic(Rule):
    """The running ergodic mean of shadow points over all rounds and local steps,
    zhat_R = (1 / (R K)) sum_r sum_k zhat_{r,k+1/2}: the server adds up one shadow point per
    local step and divides by the steps so far (before any: the initial point z0). What a
    shadow point is depends on the method: for the primal methods the client mean of the local
    points z^m_{r,k+1/2} (clients send their sums over k); FeDualEx's is the prox of the
    clients' averaged dual."""

    def ergodic_init(self, params0) -> dict:
        if not self.hp.ergodic:
            return {}
        return {"zsum": {b: jnp.zeros_like(v) for b, v in params0.items()}, "steps": jnp.zeros(()),
                "z0": dict(params0)}

    def ergodic(self, state, zsum_round) -> dict:
        if not self.hp.ergodic:
            return {}
        return {"zsum": {k: state["zsum"][k] + zsum_round[k] for k in state["zsum"]},
                "steps": state["steps"] + self.steps}

    def extra_outputs(self, problem, state, hyper) -> dict:
        if not self.hp.ergodic:
            return {}
        mean = {k: v / jnp.maximum(state["steps"], 1) for k, v in state["zsum"].items()}
        return {"ergodic": {k: jnp.where(state["steps"] == 0, state["z0"][k], mean[k]) for k in mean}}


class FeDualEx(Ergodic):
    """Federated dual extrapolation (Algorithm 1). With P_t(v) = prox_{eta_c t psi}(v):

    client, k = 0..K-1, t = eta_s r K + k:
        z_k      = P_t(sbar - s_k)
        z_half   = P_{t+1}(sbar - s_k - eta_c g(z_k; xi))
        s_{k+1}  = s_k + eta_c g(z_half; xi')
    server: s_{r+1} = s_r + eta_s mean_m (s^m_K - s_r); output z_{r+1} = P_{eta_s (r+1) K}(sbar - s_{r+1}).

    sbar = z_0 (the first primal is z_0, projected) and s_0 = 0. The broadcast carries
    v_r = sbar - s_r; clients keep their local offset u = s_k - s_r. Ergodic output (what
    Algorithm 1 returns and its theorem bounds): the running mean of the server's shadow point,
    the prox of the clients' *averaged* dual zhat_{r,k+1/2} = P_{t+1}(sbar - s_r - mean_m
    (u^m_k + eta_c g_m(z^m_k; xi))), not the mean of the clients' z_half (the prox is not
    linear): each client uploads its K half-step dual offsets. The two operator calls of a step
    draw independent noise (streams NOISE, NOISE2)."""

    def init(self, params0):
        return {"s": {b: jnp.zeros_like(v) for b, v in params0.items()}, "sbar": dict(params0),
                "t": jnp.zeros(()), **self.ergodic_init(params0)}

    def broadcast(self, state):
        return {"v": sub(state["sbar"], state["s"]), "t": state["t"]}

    def client(self, problem, data, payload, hyper, client):
        lr, lam, v, t = hyper["client_lr"], hyper["lam"], payload["v"], payload["t"]
        kept = self.steps if self.hp.ergodic else 1

        def step(k, carry):
            u, halves = carry
            z = problem.prox(sub(v, u), lr * (t + k), lam)
            half = axpy(lr, problem.grad(data, z, client, k, NOISE), u)
            z_half = problem.prox(sub(v, half), lr * (t + k + 1), lam)
            u = axpy(lr, problem.grad(data, z_half, client, k, NOISE2), u)
            if self.hp.ergodic:
                halves = {b: h.at[k].set(half[b]) for b, h in halves.items()}
            return u, halves

        zeros = ({b: jnp.zeros_like(x) for b, x in v.items()},
                 {b: jnp.zeros((kept,) + x.shape) for b, x in v.items()})
        u, halves = lax.fori_loop(0, self.steps, step, zeros)
        return {**u, **({"halfdual_" + b: h for b, h in halves.items()} if self.hp.ergodic else {})}

    def server(self, problem, state, mean, hyper):
        lr, slr, lam = hyper["client_lr"], hyper["server_lr"], hyper["lam"]
        zsum = {}
        if self.hp.ergodic:
            v = sub(state["sbar"], state["s"])
            for k in range(self.steps):
                half = {b: mean["halfdual_" + b][k] for b in v}
                shadow = problem.prox(sub(v, half), lr * (state["t"] + k + 1), lam)
                zsum = shadow if k == 0 else axpy(1.0, shadow, zsum)
        s = axpy(slr, {b: mean[b] for b in state["s"]}, state["s"])
        return {**state, "s": s, "t": state["t"] + slr * self.steps, **self.ergodic(state, zsum)}

    def output(self, problem, state, hyper):
        return problem.prox(sub(state["sbar"], state["s"]), hyper["client_lr"] * state["t"], hyper["lam"])


class PrimalSaddle(Ergodic):
    """FedMiP, Extra-step local SGD, PGDA: z_half = step(z, g(z)), then (`extra`)
    z <- step(z, g(z_half)); a step is prox_{lr psi}(z - lr g) (`prox`, mirror steps) or
    Proj(z - lr (g + s)), s a subgradient of psi's penalty at the point of the operator call;
    server prox_{eta_s lr K psi}(z + eta_s Delta) (`prox` and the server prox on, [ref]) or
    Proj(z + eta_s Delta) (a no-op for eta_s <= 1: the mean of feasible points is feasible)."""

    def init(self, params0):
        return {"z": dict(params0), **self.ergodic_init(params0)}

    def __init__(self, hp, algorithm):
        super().__init__(hp, algorithm)
        self.extra, self.prox = algorithm.extra, algorithm.prox
        self.server_prox = self.prox and hp.server_prox  # FedMiPHyper declares it

    def broadcast(self, state):
        return {"z": state["z"]}

    def _step(self, problem, z, g, at, lr, lam):
        if self.prox:
            return problem.prox(axpy(-lr, g, z), lr, lam)
        return problem.project(axpy(-lr, axpy(1.0, problem.subgradient(at, lam), g), z))

    def client(self, problem, data, payload, hyper, client):
        lr, lam, z0 = hyper["client_lr"], hyper["lam"], payload["z"]

        def step(k, carry):
            z, zsum = carry
            z_half = self._step(problem, z, problem.grad(data, z, client, k, NOISE), z, lr, lam)
            if self.extra:
                z = self._step(problem, z, problem.grad(data, z_half, client, k, NOISE2), z_half, lr, lam)
            else:
                z = z_half
            return z, {b: zsum[b] + z_half[b] for b in zsum}

        z, zsum = lax.fori_loop(0, self.steps, step, (z0, {b: jnp.zeros_like(x) for b, x in z0.items()}))
        return {**sub(z, z0), **({"zhalf_" + b: s for b, s in zsum.items()} if self.hp.ergodic else {})}

    def server(self, problem, state, mean, hyper):
        slr, lr = hyper["server_lr"], hyper["client_lr"]
        z = axpy(slr, {b: mean[b] for b in state["z"]}, state["z"])
        if self.server_prox:
            z = problem.prox(z, slr * lr * self.steps, hyper["lam"])
        else:
            z = problem.project(z)
        zsum = {k[len("zhalf_"):]: v for k, v in mean.items() if k.startswith("zhalf_")}
        return {**state, "z": z, **self.ergodic(state, zsum)}

    def output(self, problem, state, hyper):
        return state["z"]
