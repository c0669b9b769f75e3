"""Federated composite minimization (Yuan, Zaheer, Reddi, ICML'21): FedAvg, FedAvg with
subgradients, FedMiD, FedMiD-OSP, FedDualAvg, FedDualAvg-OSP, and the local baseline.

Each class declares its name, hyperparameters and the rule it runs; the update rules are
written once, in `fco_ray.rules.algorithms` (`PrimalAveraging`, `DualAveraging`: their
docstrings give the formulas). With psi = 0 all six coincide (tested).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import Field

from .base import FederatedHyper
from .rule_based import RuleAlgorithm


class PrimalAveraging(RuleAlgorithm):
    """Clients run K steps on the primal model; the server averages the model deltas.

    `client_step` is "sgd" (w -= lr g), "subgrad" (w -= lr (g + s), s a subgradient of psi
    taken at the point before the step), or "prox" (w = prox_{lr psi}(w - lr g)).
    With `server_prox`, the server output is prox_{eta_s eta_c K psi}(w + eta_s Delta) [ref].
    """

    client_step: ClassVar[str]
    server_prox: ClassVar[bool]
    rule = "fco_ray.rules.algorithms:PrimalAveraging"


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

    def select_clients(self, seed: int, rnd: int, num_clients: int) -> np.ndarray:
        if self.hp.client >= num_clients:
            raise ValueError(f"algorithm.client must be < {num_clients} (clients), got {self.hp.client}")
        return np.array([self.hp.client])


class DualAveraging(RuleAlgorithm):
    """FedDualAvg: clients average gradients in the dual; primal = prox_{etat psi}(z).

    Server state: dual `z` (z_0 = grad h(w_0) = w_0) and accumulated weight `etat`.
    Client step k: w_k = prox_{(etat + lr k) psi}(z_k) (or z_k for OSP); z_{k+1} = z_k - lr g(w_k).
    Server: z += eta_s mean(z_K - z_0); etat += eta_s lr K; output prox_{etat psi}(z).
    """

    client_prox: ClassVar[bool]
    rule = "fco_ray.rules.algorithms:DualAveraging"


class FedDualAvg(DualAveraging):
    name, client_prox = "feddualavg", True
    supports = frozenset({"minimize", "saddle"})  # a baseline on the saddle operator (ICLR'24)


class FedDualAvgOSP(DualAveraging):
    name, client_prox = "feddualavg_osp", False
