"""The composite family's K local steps on the least-squares problems (E1 lasso, and any
`LeastSquares` rule) under an l1 penalty or none, as the numba whole-step kernel
`kernels.least_squares_steps`: one compiled call per block of clients, a fused group's
members sharing each minibatch (gathered once a step, the G models taken two at a time
through it).

It serves the rules `PrimalAveraging` (FedAvg, FedAvg with subgradients, FedMiD, FedMiD-OSP,
local) and `DualAveraging` (FedDualAvg, FedDualAvg-OSP) through the kernel's thresholds:

    u = prox_{pre[k] psi}(w);  g = grad f_batch(u) (+ lam sign(w));  w = prox_{post[k] psi}(w - lr g)

PrimalAveraging: pre = 0, post = lr lam with a prox step, the subgradient term for `subgrad`;
DualAveraging: pre = (etat + lr k) lam with the client prox, post = 0.
"""
from __future__ import annotations

import numpy as np

from ..ops.random import BATCH
from . import penalty_weight


def l1_weight(psi) -> float | None:
    """lam if psi is lam ||w||_1 (or zero) on the block `w` and nothing else, else None."""
    return penalty_weight(psi, "l1")


class LeastSquaresL1:
    name = "least_squares_l1"
    rules = ("fco_ray.rules.algorithms:PrimalAveraging", "fco_ray.rules.algorithms:DualAveraging")
    problem_rule = "fco_ray.rules.problems:LeastSquares"

    def serves(self, group, problem) -> bool:
        """Minibatches, psi an l1 penalty (or none) on `w`, a vector model `w` plus `b`."""
        return (group.hp.minibatch is not None and l1_weight(problem.psi) is not None
                and set(problem.shapes) == {"w", "b"} and len(problem.shapes["w"]) == 1)

    def client_sums(self, group, problem, payload, rows, key, weights) -> dict:
        rows = np.asarray(rows)
        ids = np.asarray(key.client_ids, dtype=np.uint64).reshape(-1)
        if len(ids) != len(rows):  # the kernel does not check bounds
            raise ValueError(f"key has {len(ids)} client ids for {len(rows)} rows")
        clients, g = len(rows), group.size
        lr, lam, pre, post, sub_lam = self._thresholds(group, problem, clients)
        dual = "z" in payload
        model = payload["z"] if dual else payload["w"]
        # each client's G rows start at the members' models: w (C G, P), b (C G,), updated in place
        start_w = np.asarray(model["w"], float).reshape(g, -1)
        start_b = np.asarray(model["b"], float).reshape(g)
        w = np.empty((clients, g, start_w.shape[1]))
        w[:] = start_w  # client c's rows c G .. c G + G - 1
        w = w.reshape(clients * g, -1)
        b = np.tile(start_b, clients)
        if dual and group.members[0].client_prox:  # (etat + lr k) lam: the round's etat
            etat = np.tile(np.asarray(payload["etat"], float).reshape(g), clients)
            pre = np.ascontiguousarray((etat[None, :] + lr[None, :] * np.arange(len(pre))[:, None]) * lam)
        from ..ops import kernels  # numba: at the first round, not with the schemas

        sizes, offsets = problem.row_ranges(rows)
        train = problem.train
        kernels.least_squares_steps(train.arrays["x"].reshape(train.num_clients * train.max_samples, -1),
                                    train.arrays["y"].reshape(-1), key.seed, key.round, BATCH, ids, sizes,
                                    offsets, group.hp.batch_size, w, b, lr, pre, post, sub_lam)
        weights = np.asarray(weights, float)
        moved = w.reshape(clients, g, -1)
        moved -= start_w  # in place: each client's models minus where they started
        dw = weights @ moved.reshape(clients, -1)
        db = weights @ (b.reshape(clients, g) - start_b)
        return {"w": dw.reshape((g,) + problem.shapes["w"]), "b": db}

    @staticmethod
    def _thresholds(group, problem, clients: int):
        """(lr, lam, pre, post, sub_lam) of the kernel's C G rows (client-major), by the rule:
        fixed for a group and a client count (kept on the group; the dual's `pre` is made
        each round from its etat)."""
        cache = vars(group).setdefault("_least_squares_l1", {})
        if clients not in cache:
            steps, g = group.hp.local_steps, group.size
            hyper = group.rule_hyper(l1_weight(problem.psi))
            lr = np.ascontiguousarray(np.tile(hyper["client_lr"], clients))
            lam = np.tile(hyper["lam"], clients)
            zeros = np.zeros((steps, clients * g))
            rule = group.members[0]
            if hasattr(rule, "client_prox"):  # DualAveraging: the thresholds before the step
                post, sub_lam = zeros, np.zeros(clients * g)
            else:  # PrimalAveraging: a prox after the step, or the subgradient term
                post = np.ascontiguousarray(np.broadcast_to(lr * lam, (steps, clients * g))) \
                    if rule.client_step == "prox" else zeros
                sub_lam = lam if rule.client_step == "subgrad" else np.zeros(clients * g)
            cache[clients] = (lr, lam, zeros, post, np.ascontiguousarray(sub_lam))
        return cache[clients]


LEAST_SQUARES_L1 = LeastSquaresL1()
