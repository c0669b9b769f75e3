"""The composite family's K local steps on the least-squares problems with a matrix model
(E2 lowrank, and any `LeastSquares` rule whose `w` is a matrix) under a nuclear-norm penalty
or none: the minibatch gradients of all clients and members of a round at once, then the
nuclear prox as one batched `np.linalg.svd` over every (client, member) pair with a nonzero
threshold. Python loops over the K steps only; a fused group's members share each client's
minibatch (gathered once a step, the G models taken two at a time through it).

It serves the rules `PrimalAveraging` (FedAvg, FedAvg with subgradients, FedMiD, FedMiD-OSP,
local) and `DualAveraging` (FedDualAvg, FedDualAvg-OSP), as the rules define their steps:

    PrimalAveraging: g = grad f_batch(w) (+ lam U V^T, `subgrad`); w = w - lr g, then
                     prox_{lr lam ||.||_*}(w) with `prox`;
    DualAveraging:   u = prox_{(etat + lr k) lam ||.||_*}(z) (z itself for the OSP variant);
                     z = z - lr grad f_batch(u).

The minibatch of client c at step k is the rule's (`fco_ray.rules.problems.Client.integers`):
`kernels.keyed_integers(seed, round, k, BATCH, ...)` plus the client's row offset. The prox
is U diag(max(s - tau, 0)) V^T (`prox.prox_nuclear`; tau = 0 leaves a matrix unchanged, as
the rule's `nuclear_ball`), the subgradient the polar factor over s > 1e-12 max(s)
(`regularizers._polar`, the rule's `polar`): equal to the rule's householder/QR routes up to
rounding (tests/engine/test_accelerators.py, 1e-9).
"""
from __future__ import annotations

import numpy as np

from ..ops.prox import prox_nuclear
from ..ops.random import BATCH
from ..ops.regularizers import _polar
from . import penalty_weight


def nuclear_weight(psi) -> float | None:
    """lam if psi is lam ||w||_* (or zero) on the block `w` and nothing else, else None."""
    return penalty_weight(psi, "nuclear")


def shrink(w: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """prox_{tau ||.||_*} of each matrix of w (C, G, m, n), tau per member (G,): one batched
    SVD over the (client, member) pairs with tau > 0; the others unchanged (w itself where no
    tau is positive: tau = 0 is the identity, as the rule's `nuclear_ball`)."""
    on = tau > 0
    if on.all():
        return prox_nuclear(w, tau[None, :, None])
    if not on.any():
        return w
    out = w.copy()
    out[:, on] = prox_nuclear(w[:, on], tau[on][None, :, None])
    return out


class LeastSquaresNuclear:
    name = "least_squares_nuclear"
    rules = ("fco_ray.rules.algorithms:PrimalAveraging", "fco_ray.rules.algorithms:DualAveraging")
    problem_rule = "fco_ray.rules.problems:LeastSquares"

    def serves(self, group, problem) -> bool:
        """Minibatches, psi a nuclear penalty (or none) on `w`, a matrix model `w` plus `b`."""
        return (group.hp.minibatch is not None and nuclear_weight(problem.psi) is not None
                and set(problem.shapes) == {"w", "b"} and len(problem.shapes["w"]) == 2)

    def client_sums(self, group, problem, payload, rows, key, weights) -> dict:
        from ..ops import kernels  # numba: at the first round, not with the schemas

        rows = np.asarray(rows)
        ids = np.asarray(key.client_ids, dtype=np.uint64).reshape(-1)
        if len(ids) != len(rows):  # the kernel does not check bounds
            raise ValueError(f"key has {len(ids)} client ids for {len(rows)} rows")
        clients, g, shape = len(rows), group.size, problem.shapes["w"]
        hyper = group.rule_hyper(nuclear_weight(problem.psi))
        lr, lam = np.asarray(hyper["client_lr"], float), np.asarray(hyper["lam"], float)
        rule, batch = group.members[0], group.hp.batch_size
        dual = "z" in payload
        model = payload["z"] if dual else payload["w"]
        start_w = np.asarray(model["w"], float).reshape((g,) + shape)
        start_b = np.asarray(model["b"], float).reshape(g)
        # the C G rows (client-major) of the kernel: w (C, G, m, n) = (C G, P) and b (C G,)
        w = np.repeat(start_w[None], clients, axis=0)
        b = np.tile(start_b, clients)
        gw, gb = np.empty((clients * g, w[0, 0].size)), np.empty(clients * g)
        sizes, offsets = problem.row_ranges(rows)
        sizes, offsets = np.ascontiguousarray(sizes, np.int64), np.ascontiguousarray(offsets, np.int64)
        train = problem.train
        x = train.arrays["x"].reshape(train.num_clients * train.max_samples, -1)
        y = train.arrays["y"].reshape(-1)
        client_prox = dual and rule.client_prox
        etat = np.asarray(payload["etat"], float).reshape(g) if client_prox else None
        step = getattr(rule, "client_step", None)
        neg_lr = np.tile(-lr, clients)[:, None]
        for k in range(group.hp.local_steps):
            if client_prox and k == 0:  # z_0 is every client's: its prox once per member
                at = np.repeat(shrink(start_w[None], etat * lam), clients, axis=0)
            elif client_prox:
                at = shrink(w, (etat + lr * k) * lam)
            else:
                at = w
            kernels.least_squares_grads(x, y, key.seed, key.round, k, BATCH, ids, sizes, offsets, batch,
                                        np.ascontiguousarray(at.reshape(clients * g, -1)), b, gw, gb)
            gw *= 2.0
            if step == "subgrad" and lam.any():  # the rule's 0 U V^T adds nothing
                gw = (lam[None, :, None, None] * _polar(w)).reshape(gw.shape) + gw
            gw *= neg_lr
            w += gw.reshape(w.shape)
            b += neg_lr[:, 0] * (2.0 * gb)
            if step == "prox":
                w = shrink(w, lr * lam)
        weights = np.asarray(weights, float)
        dw = np.tensordot(weights, w - start_w, axes=1)
        db = weights @ (b.reshape(clients, g) - start_b)
        return {"w": dw, "b": db}


LEAST_SQUARES_NUCLEAR = LeastSquaresNuclear()
