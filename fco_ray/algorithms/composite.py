"""Federated composite minimization (Yuan, Zaheer, Reddi, ICML'21): FedAvg, FedAvg with
subgradients, FedMiD, FedMiD-OSP, FedDualAvg, FedDualAvg-OSP, and the local baseline.

The update rules are in each class's docstring. With psi = 0 all six coincide (tested).
A client's K local steps run as written below, or as one compiled loop where the problem
has one (`Problem.composite_steps`: the linear problems with an l1 penalty, the same numbers).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from ..ops.random import Key
from ..ops.tree import axpy, copy, stack, sub
from ..problems.base import Problem
from .base import Algorithm, FederatedHyper


def difference(final: dict, start: dict) -> dict:
    """final - start blockwise, in place in `final` (a client's own fresh arrays)."""
    for k in final:
        final[k] -= start[k]
    return final


class PrimalAveraging(Algorithm):
    """Clients run K steps on the primal model; the server averages the model deltas.

    `client_step` is "sgd" (w -= lr g), "subgrad" (w -= lr (g + s), s a subgradient of psi
    taken at the point before the step), or "prox" (w = prox_{lr psi}(w - lr g)).
    With `server_prox`, the server output is prox_{eta_s eta_c K psi}(w + eta_s Delta) [ref].
    """

    client_step: ClassVar[str]
    server_prox: ClassVar[bool]
    fusable = True
    rule = "fco_ray.rules.algorithms:PrimalAveraging"

    def server_init(self, problem, params0):
        return {"w": copy(params0)}

    def broadcast(self, state):
        return {"w": state["w"]}

    def client_update(self, problem: Problem, payload, rows, key: Key):
        lr, psi, steps = self.hp.client_lr, problem.psi, self.hp.local_steps
        w = stack(payload["w"], len(rows))
        # the same K steps as one compiled loop where the problem has one (Problem.composite_steps)
        post = (np.broadcast_to(np.asarray(lr, float), (steps,) + np.shape(lr))
                if self.client_step == "prox" else np.zeros(steps))
        fast = problem.composite_steps(w, rows, key, self.hp.batch_size, lr, np.zeros(steps), post,
                                       self.client_step == "subgrad")
        if fast is not None:
            return difference(fast, payload["w"])
        for k in range(steps):
            g = problem.grad(w, rows, key.with_step(k), self.hp.batch_size)
            if self.client_step == "subgrad":
                g = axpy(1.0, psi.subgradient(w), g)
            w = axpy(-lr, g, w)
            if self.client_step == "prox":
                w = psi.prox(w, lr)
        return sub(w, payload["w"])

    def server_update(self, problem, state, mean, rnd):
        w = axpy(self.hp.server_lr, mean, state["w"])
        if self.server_prox:
            w = problem.psi.prox(w, self.hp.server_lr * self.hp.client_lr * self.hp.local_steps)
        return {"w": w}

    def output(self, problem, state):
        return state["w"]


class FedAvg(PrimalAveraging):
    name, client_step, server_prox = "fedavg", "sgd", False


class FedAvgSubgrad(PrimalAveraging):
    name, client_step, server_prox = "fedavg_subgrad", "subgrad", False


class FedMiD(PrimalAveraging):
    name, client_step, server_prox = "fedmid", "prox", True
    supports = frozenset({"minimize", "saddle"})  # a baseline on the saddle operator (ICLR'24)


class FedMiDOSP(PrimalAveraging):
    name, client_step, server_prox = "fedmid_osp", "sgd", True


class LocalHyper(FederatedHyper):
    client: int = Field(0, ge=0, description="the one client that trains, alone")
    server_lr: float = Field(1.0, ge=1.0, le=1.0)


class Local(PrimalAveraging):
    """Baseline: one client runs proximal SGD on its own data, never communicating."""

    name, client_step, server_prox = "local", "prox", False
    Hyper = LocalHyper
    rule = PrimalAveraging.rule  # only the clients chosen differ (select_clients)

    def select_clients(self, seed: int, rnd: int, num_clients: int) -> np.ndarray:
        if self.hp.client >= num_clients:
            raise ValueError(f"algorithm.client must be < {num_clients} (clients), got {self.hp.client}")
        return np.array([self.hp.client])


class DualAveraging(Algorithm):
    """FedDualAvg: clients average gradients in the dual; primal = prox_{etat psi}(z).

    Server state: dual `z` (z_0 = grad h(w_0) = w_0) and accumulated weight `etat`.
    Client step k: w_k = prox_{(etat + lr k) psi}(z_k) (or z_k for OSP); z_{k+1} = z_k - lr g(w_k).
    Server: z += eta_s mean(z_K - z_0); etat += eta_s lr K; output prox_{etat psi}(z).
    """

    client_prox: ClassVar[bool]
    fusable = True
    rule = "fco_ray.rules.algorithms:DualAveraging"

    def server_init(self, problem, params0):
        return {"z": copy(params0), "etat": 0.0}

    def broadcast(self, state):
        return {"z": state["z"], "etat": state["etat"]}

    def client_update(self, problem: Problem, payload, rows, key: Key):
        lr, steps = self.hp.client_lr, self.hp.local_steps
        z = stack(payload["z"], len(rows))
        pre = (np.stack([payload["etat"] + lr * k for k in range(steps)]).astype(float)
               if self.client_prox else np.zeros(steps))
        fast = problem.composite_steps(z, rows, key, self.hp.batch_size, lr, pre, np.zeros(steps),
                                       False)
        if fast is not None:
            return difference(fast, payload["z"])
        for k in range(steps):
            w = problem.psi.prox(z, payload["etat"] + lr * k) if self.client_prox else z
            g = problem.grad(w, rows, key.with_step(k), self.hp.batch_size)
            z = axpy(-lr, g, z)
        return sub(z, payload["z"])

    def server_update(self, problem, state, mean, rnd):
        return {
            "z": axpy(self.hp.server_lr, mean, state["z"]),
            "etat": state["etat"] + self.hp.server_lr * self.hp.client_lr * self.hp.local_steps,
        }

    def output(self, problem, state):
        return problem.psi.prox(state["z"], state["etat"])


class FedDualAvg(DualAveraging):
    name, client_prox = "feddualavg", True
    supports = frozenset({"minimize", "saddle"})  # a baseline on the saddle operator (ICLR'24)


class FedDualAvgOSP(DualAveraging):
    name, client_prox = "feddualavg_osp", False
