"""Federated SVRG and friends (Konecny, McMahan, Ramage, Richtarik 2016): distributed GD,
naive FSVRG (Alg. 3), FSVRG (Alg. 4), DANE and CoCoA+, on finite-sum problems with per-node
data (problem kind "nodes", e.g. `sparse_text_logreg`). The exact rules are in each class's docstring.

Notation: node k holds n_k samples, n = sum_k n_k, f(w) = sum_k (n_k/n) F_k(w),
f_i(w) = l_i(<x_i, w>) + (lam/2)||w||^2 (logistic l_i). The step size h is `client_lr`.

Rounds. A communication round is one outer iteration. FSVRG, naive FSVRG and DANE need
grad f(w^t) before the local work, so they use two client exchanges per round
(`exchanges_per_round = 2`; the state's `phase`, sent with the broadcast, says which is
next): exchange 1 returns the nodes' gradients, exchange 2 the local passes' results.
`floats_up/down` count both. GD and CoCoA+ use one exchange per round.

Aggregation. Every algorithm here weights node k's message by n_k (`client_weights`), so
the gradient exchange yields sum_k (n_k/n) grad F_k = grad f. Uniform averages (naive FSVRG,
DANE with `weighting: uniform`) sum the w_k - w^t with coefficient n_k (1/n_k) = 1 and send
`norm` = sum_k n_k (1/n_k) = K beside them: the server divides the two means.

Local work goes through the problem's "nodes" interface (`fco_ray.problems.nodes.Nodes`;
how a pass runs is one `LocalPasses` / `SDCAPasses` value): compiled per-node passes (`fco_ray.ops.kernels_sparse`) that add every node's weighted result
into one (d,) vector per shard (messages are `presummed`). Permutations and draws are keyed
by (seed, round, pass, node, position): results do not depend on sharding.

Fused step-size groups (`fco_ray.core.group`). GD, FSVRG, naive FSVRG and DANE are `fusable`: G
configurations that differ only in real-valued hyperparameters (`client_lr`; DANE's `eta`,
`mu`) visit the same nodes, permutations and draws, so `group_client_update` runs the
whole group in ONE pass over each node's data (`kernels_sparse.*_group`: each nonzero read
once, G local models updated) and returns the group's messages (G, ...) pre-summed over the
nodes. The state then holds w (and grad f) as (G, d) and the varying hyperparameters are
arrays (G,); the rules below are written to take either. Every member computes the same
floating-point operations as its own run (tests/engine/test_svrg_fused.py: rows equal to 1e-12,
in practice bit for bit). CoCoA+ has no real-valued hyperparameter (only `local_passes`):
it does not fuse.
"""
from __future__ import annotations

import abc
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from ..ops.random import Key
from ..ops.tree import copy, per_row
from ..problems.nodes import LocalPasses, Nodes, SDCAPasses
from .base import Algorithm, Hyper


def per_node(lr, sizes: np.ndarray) -> np.ndarray:
    """h_k = lr / n_k: (nodes,) for one step size, (nodes, G) for a fused group's (G,)."""
    lr = np.asarray(lr, np.float64)
    return lr / sizes if lr.ndim == 0 else lr[None, :] / sizes[:, None]


def per_member(value, like: np.ndarray) -> np.ndarray:
    """A number that is the same for every member, as the message of one configuration (a
    0-d array) or of a fused group (one entry per member of `like`, a (G,)-stack of models):
    then a group's message has G times the floats of one member's, as the counts expect."""
    return np.array(value) if np.ndim(like) == 1 else np.full(len(like), float(value))


# ---- hyperparameters ------------------------------------------------------------------------
class SVRGFamilyHyper(Hyper):
    """`client_lr` is the step size h; all nodes take part by default. Messages are weighted
    by n_k (`weighting` matters only where an algorithm says so)."""

    client_lr: float = Field(1.0, gt=0, allow_inf_nan=False, description="step size h")
    clients_per_round: int | None = Field(None, ge=1, description="None = all nodes")
    weighting: Literal["uniform", "samples"] = "uniform"


class NaiveHyper(SVRGFamilyHyper):
    local_steps: int | None = Field(None, ge=1, description="m; None = n_k steps on node k")


class DANEHyper(SVRGFamilyHyper):
    eta: float = Field(1.0, gt=0, allow_inf_nan=False, description="weight of grad f(w^t)")
    mu: float = Field(0.0, ge=0, allow_inf_nan=False, description="proximal weight")
    local_passes: int = Field(2, ge=1, description="SVRG passes of the inexact local solver")


class CoCoAHyper(Hyper):
    """Local SDCA has no step size: only the number of passes."""

    clients_per_round: None = Field(None, description="CoCoA+ (sigma' = K) needs every node")
    weighting: Literal["uniform", "samples"] = "uniform"
    local_passes: int = Field(1, ge=1, description="SDCA passes over the node's data per round")


# ---- algorithms -----------------------------------------------------------------------------
class SVRGFamily(Algorithm):
    """Shared parts: messages weighted by n_k and pre-summed per shard; the state's model is
    `w`; a node's message without local work is its full gradient grad F_k(w)."""

    Hyper = SVRGFamilyHyper
    supports: ClassVar[frozenset[str]] = frozenset({"nodes"})
    presummed = True
    fusable = True
    serves_group = True

    def client_weights(self, problem, rows):
        return problem.node_sizes(rows).astype(float)

    def server_init(self, problem, params0):
        if not isinstance(problem, Nodes):
            raise ValueError(f"algorithm {self.name!r} needs a problem with per-node finite-sum "
                             f"data (kind 'nodes', e.g. 'sparse_text_logreg'): problem "
                             f"{problem.name!r} does not offer fco_ray.problems.nodes.Nodes")
        return {"w": copy(params0)["w"]}

    def output(self, problem, state):
        return {"w": state["w"]}

    def client_update(self, problem, payload, rows, key):
        weights = self.client_weights(problem, rows)
        return {"g": problem.node_gradient_sum(rows, payload["w"], weights)}

    def group_client_update(self, problem, payload, rows, key):
        """A stacked group's messages: payload["w"] (and "g") are (G, d), `self.hp`'s
        varying hyperparameters (G,); one pass over each node's data for every member."""
        return self.client_update(problem, payload, rows, key)


class TwoExchange(SVRGFamily):
    """Exchange 1 (phase 0): grad f(w^t); exchange 2 (phase 1): `local_work` from w^t, then
    the server step `combine`."""

    exchanges_per_round = 2

    def server_init(self, problem, params0):
        return {**super().server_init(problem, params0), "phase": 0}

    def broadcast(self, state):
        # the phase goes to every member of a fused group (one float each, as unfused)
        phase = per_member(float(state["phase"]), state["w"])
        if state["phase"] == 0:
            return {"w": state["w"], "phase": phase}
        return {"w": state["w"], "g": state["g"], "phase": phase}

    def client_update(self, problem, payload, rows, key):
        if np.ravel(payload["phase"])[0] == 0:
            return super().client_update(problem, payload, rows, key)
        return self.local_work(problem, rows, payload, key, self.client_weights(problem, rows))

    def server_update(self, problem, state, mean, rnd):
        if state["phase"] == 0:
            return {"w": state["w"], "g": mean["g"], "phase": 1}
        return {"w": state["w"] + self.combine(problem, mean), "phase": 0}

    @abc.abstractmethod
    def local_work(self, problem, rows, payload: dict, key: Key, weights: np.ndarray) -> dict:
        """Weighted sums of the local passes' messages of nodes `rows` from payload["w"]."""

    def combine(self, problem, mean) -> np.ndarray:
        """Server step from the n_k-weighted mean message."""
        return mean["delta"] / per_row(mean["norm"], np.ndim(mean["delta"]))

    @staticmethod
    def norm(sizes: np.ndarray, weights: np.ndarray, weighting: str) -> float:
        """sum_k weights_k * (1/n_k) (uniform) or sum_k weights_k (samples): the divisor that
        turns the n_k-weighted mean of the deltas into the uniform / n_k-weighted mean."""
        return float((weights / sizes).sum()) if weighting == "uniform" else float(weights.sum())

    @staticmethod
    def delta_coef(sizes: np.ndarray, weights: np.ndarray, weighting: str) -> np.ndarray:
        """Per-node coefficients of w_k - w^t in the summed `delta`."""
        return weights / sizes if weighting == "uniform" else weights


class GD(SVRGFamily):
    """Distributed gradient descent: w <- w - h grad f(w), one exchange per round; grad f is
    the n_k-weighted mean of the nodes' gradients (`weighting` is not used)."""

    name = "gd"

    def broadcast(self, state):
        return {"w": state["w"]}

    def server_update(self, problem, state, mean, rnd):
        return {"w": state["w"] - per_row(self.hp.client_lr, np.ndim(mean["g"])) * mean["g"]}


class FSVRG(TwoExchange):
    """FSVRG (Alg. 4): node k makes one pass over a random permutation of its n_k samples,
        w_k <- w_k - h_k ( S_k [grad f_i(w_k) - grad f_i(w^t)] + grad f(w^t) ),  h_k = h / n_k;
    server: w^{t+1} = w^t + A sum_k (n_k/n)(w_k - w^t). S_k, A from `sparsity_scalings`
    (computed once with the problem). `weighting` is not used (the n_k/n weights are Alg. 4's).
    """

    name = "fsvrg"

    def local_work(self, problem, rows, payload, key, weights):
        sizes = problem.node_sizes(rows)
        local = LocalPasses(h=per_node(self.hp.client_lr, sizes), scaled=True)
        return {"delta": problem.node_pass_sum(rows, key, payload["w"], payload["g"], weights, local)}

    def combine(self, problem, mean):
        return problem.aggregation * mean["delta"]


class NaiveFSVRG(TwoExchange):
    """Naive FSVRG (Alg. 3): node k makes m steps on samples drawn uniformly (with
    replacement) from its data, w_k <- w_k - h (grad f_i(w_k) - grad f_i(w^t) + grad f(w^t));
    server: w^{t+1} = w^t + (1/K) sum_k (w_k - w^t) (`weighting: samples`: n_k/n weights).
    m = `local_steps`; None means m_k = n_k (one epoch's worth, comparable with FSVRG)."""

    name = "fsvrg_naive"
    Hyper = NaiveHyper

    def local_work(self, problem, rows, payload, key, weights):
        sizes, m = problem.node_sizes(rows), self.hp.local_steps
        steps = sizes if m is None else np.full(len(sizes), m, np.int64)
        lr = np.asarray(self.hp.client_lr, np.float64)
        local = LocalPasses(h=np.full((len(sizes),) + lr.shape, lr), steps=steps)
        delta = problem.node_pass_sum(rows, key, payload["w"], payload["g"],
                                      self.delta_coef(sizes, weights, self.hp.weighting), local)
        return {"delta": delta,
                "norm": per_member(self.norm(sizes, weights, self.hp.weighting), payload["w"])}


class DANE(TwoExchange):
    """DANE: node k approximately solves
        min_w F_k(w) - (grad F_k(w^t) - eta grad f(w^t))^T w + (mu/2) ||w - w^t||^2
    by `local_passes` SVRG passes (step h / n_k, random permutation each pass, the SVRG
    anchor moved to the pass's result); the server averages the w_k (`weighting`).

    With anchor a (first pass a = w^t) the subproblem's variance-reduced gradient is
        grad f_i(w) - grad f_i(a) + [grad F_k(a) - grad F_k(w^t) + eta grad f(w^t) + mu (a - w^t)]
        + mu (w - a),
    so each pass is an SVRG pass with that bracket as the (per-node) drift
    (`node_pass_sum` with `LocalPasses(passes, eta, mu)`)."""

    name = "dane"
    Hyper = DANEHyper

    def local_work(self, problem, rows, payload, key, weights):
        hp, sizes = self.hp, problem.node_sizes(rows)
        local = LocalPasses(h=per_node(hp.client_lr, sizes), passes=hp.local_passes, eta=hp.eta, mu=hp.mu)
        delta = problem.node_pass_sum(rows, key, payload["w"], payload["g"],
                                      self.delta_coef(sizes, weights, hp.weighting), local)
        return {"delta": delta, "norm": per_member(self.norm(sizes, weights, hp.weighting), payload["w"])}


class CoCoAPlus(SVRGFamily):
    """CoCoA+ (Ma et al. 2015) with local SDCA, adding (gamma = 1, sigma' = K).

    Dual variables alpha_i (b_i = y_i alpha_i in [0, 1]), w(alpha) = (1/(lam n)) sum_i alpha_i x_i.
    Node k runs `local_passes` SDCA passes over random permutations of its samples on
        max_{d alpha} -(1/n) sum_{i in P_k} l_i*(-alpha_i - d alpha_i) - (1/n) w^T A_k d alpha
                      - (lam sigma'/2) ||A_k d alpha / (lam n)||^2,
    i.e. exact coordinate steps (`kernels_sparse.sdca_step`) against v_k = w + sigma' dw_k with
    q_i = sigma' ||x_i||^2 / (lam n); it sends dw_k = A_k d alpha / (lam n) and the server
    adds w += gamma sum_k dw_k. Starts from alpha = 0, i.e. w = 0 (params0 is not used).

    The duals live on the nodes, as in the paper: they are client state (`client_state`),
    kept by the backend per (run, node) next to the node's data, one array b of length n_k
    per node. sigma' and n travel with the broadcast (a shard does not know them).
    """

    name = "cocoa_plus"
    Hyper = CoCoAHyper
    client_state = True
    fusable = False  # no real-valued hyperparameter to fuse over

    def server_init(self, problem, params0):
        super().server_init(problem, params0)  # checks the problem
        return {"w": np.zeros(np.shape(params0["w"])), "sigma": float(problem.num_clients),
                "n": float(problem.total_samples)}

    def broadcast(self, state):
        return {"w": state["w"], "sigma": state["sigma"], "n": state["n"]}

    def server_update(self, problem, state, mean, rnd):
        # mean["delta"] = sum_k n_k (dw_k / n_k) / n; gamma = 1
        return {**state, "w": state["w"] + state["n"] * mean["delta"]}

    def init_client_state(self, problem, rows):
        return [np.zeros(n) for n in problem.node_sizes(rows)]

    def client_update(self, problem, payload, rows, key, client_state):
        sizes = problem.node_sizes(rows)
        duals = np.concatenate(client_state) if len(rows) else np.zeros(0)
        local = SDCAPasses(passes=self.hp.local_passes, sigma=payload["sigma"], n=payload["n"])
        delta = problem.node_sdca_sum(rows, key, payload["w"], duals,
                                      self.client_weights(problem, rows) / sizes, local)
        return {"delta": delta}, np.split(duals, np.cumsum(sizes)[:-1])


ALL: tuple[type[Algorithm], ...] = (GD, FSVRG, NaiveFSVRG, DANE, CoCoAPlus)
