"""Federated composite saddle point methods (Bai & Bullins, ICLR'24): FeDualEx, FedMiP,
Extra-step local SGD and federated projected gradient descent-ascent (PGDA).

They act on z = (x, y) through the problem's operator g(z) = (grad_x f, -grad_y f)
(the problem rule's `grad`) and psi(z) = psi1(x) + psi2(y) (blockwise), with the Euclidean
distance-generating function l(z) = 1/2 ||z||^2. Each class declares its name,
hyperparameters and the rule it runs; the update rules are written once, in
`fco_ray.rules.algorithms` (`FeDualEx`, `PrimalSaddle`: their docstrings give the formulas).
FedDualAvg and FedMiD of `composite.py` run unchanged on the same operator (one operator
call per local step).

The two operator calls of an extra-step update use the stream tags NOISE and NOISE2, so
their noises / minibatches are independent draws (g(z; xi), g(z_half; xi')).

Sequential FeDualEx is FeDualEx with one client (problem `clients: 1`, server_lr 1: then
t_{r,K} = t_{r+1,0} and the rounds chain into one run of stochastic dual extrapolation);
deterministic FeDualEx is FeDualEx on a problem without noise (`noise: 0`).
"""
from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from .base import FederatedHyper
from .rule_based import RuleAlgorithm


class SaddleHyper(FederatedHyper):
    ergodic: bool = Field(
        True, description="also report the ergodic average (metrics suffixed _ergodic): "
        "FeDualEx uploads each local step's dual (floats_up x (1 + K)), the primal methods "
        "each client's sum of z_half (floats_up x 2)")


class _Ergodic(RuleAlgorithm):
    """A saddle method that also reports the running ergodic mean of its shadow points
    (`fco_ray.rules.algorithms.Ergodic`), suffixed `_ergodic`."""

    Hyper = SaddleHyper
    supports = frozenset({"saddle"})

    def extra_output_names(self) -> list[str]:
        return ["ergodic"] if self.hp.ergodic else []


class FeDualEx(_Ergodic):
    """Federated dual extrapolation (Algorithm 1; `fco_ray.rules.algorithms.FeDualEx`):
    clients extrapolate in the dual from the server's anchor, the server averages the duals
    and outputs the prox of the anchor minus the dual."""

    name = "feddualex"
    rule = "fco_ray.rules.algorithms:FeDualEx"


class PrimalSaddle(_Ergodic):
    """Clients run K local steps on z; the server averages the model deltas
    (`fco_ray.rules.algorithms.PrimalSaddle`).

    `extra`: two operator calls per step (extragradient), else one (gradient descent-ascent).
    `prox`: steps are z' = prox_{eta_c psi}(z - eta_c g) (mirror steps);
    else z' = Proj(z - eta_c (g + s)), s a subgradient of the penalty part of psi at the point
    where g is taken, Proj the projection onto the constraint set.
    Server: z_{r+1} = prox_{eta_s eta_c K psi}(z_r + eta_s Delta_r) with `prox` [ref], else
    Proj(z_r + eta_s Delta_r).
    """

    extra: ClassVar[bool]
    prox: ClassVar[bool]
    rule = "fco_ray.rules.algorithms:PrimalSaddle"


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
