"""Federated SVRG and friends (Konecny, McMahan, Ramage, Richtarik 2016): distributed GD,
naive FSVRG (Alg. 3), FSVRG (Alg. 4), DANE and CoCoA+, on problems with per-node sparse
data (`fco_ray.problems.text.SparseTextLogReg`). Exact rules: ALGORITHMS.md.

Notation: node k holds n_k samples, n = sum_k n_k, f(w) = sum_k (n_k/n) F_k(w),
f_i(w) = l_i(<x_i, w>) + (lam/2)||w||^2 (logistic l_i). The step size h is `client_lr`.

Rounds. A communication round is one outer iteration. FSVRG, naive FSVRG and DANE need
grad f(w^t) before the local work, so they use two client exchanges per round
(`exchanges_per_round = 2`; the state's `phase` says which is next): exchange 1 returns the
nodes' gradients, exchange 2 the local passes' results. `floats_up/down` count both. GD and
CoCoA+ use one exchange per round.

Aggregation. Every algorithm here weights node k's message by n_k (`client_weights`), so
the gradient exchange yields sum_k (n_k/n) grad F_k = grad f. Uniform averages (naive FSVRG,
DANE with `weighting: uniform`) send (delta_k / n_k, 1 / n_k) and divide the two means.

Local passes (the hot path) are vectorized ACROSS NODES: step j processes the j-th sample of
every node's order at once (nodes that have finished drop out; nodes are sorted longest-first
so the active ones are a prefix). The whole pass is listed up front (`Schedule`), so a step
is a dozen NumPy calls on slices. Permutations and draws are keyed by (seed, round, node,
position) (`Key`, streams PERMUTATION / BATCH): results do not depend on sharding.

Lazy updates. Between two visits of coordinate j, node k's update of u = w_k - anchor is
affine with constant coefficients:  u <- (1 - c) u - h_k G_j,  c = h_k (s_k^j lam + mu),
so a step only touches the coordinates of its sample; the skipped steps are applied in
closed form, u_m = (1 - c)^m u - h_k G_j (1 - (1 - c)^m) / c, when the coordinate is next
visited, and once for all coordinates at the end of the pass. Local models live only on the
(node, feature) pairs a node touches. Work per pass is O(nnz + n) plus O(C d) to write the
dense (C, d) messages of a chunk of C nodes; memory likewise.
"""
from __future__ import annotations

import abc
import uuid

import numpy as np
from pydantic import Field
from scipy.special import expit

from ..problems.text import SparseNodes, SparseTextLogReg, logistic, margins, node_loss_grads, ranges
from ..random import BATCH, PERMUTATION, Key
from ..tree import copy
from .base import Algorithm, Hyper

MEMORY_RUNS = 8  # CoCoA+ runs whose dual variables a problem keeps at once (oldest dropped)


# ---- vectorized local passes ----------------------------------------------------------------
def _affine_steps(u, m, c, b):
    """m steps of u <- (1 - c) u - b in closed form (c < 1; c = 0 gives u - m b)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = m * np.log1p(-c)
        return np.exp(t) * u - b * np.where(c > 0, -np.expm1(t) / c, m)


def _at(array: np.ndarray, own: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """array[cols] for a shared (d,) vector, array[own, cols] for a per-node (C, d) stack."""
    return array[cols] if array.ndim == 1 else array[own, cols]


POSITION_BITS = 24  # samples per node < 2^24 (16.7M): position and node id share one key


def _node_uniforms(key: Key, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of counts[k] uniforms per node k, node-major, each keyed by (seed, round,
    step, stream, global node id, position): no (C, max count) rectangle is built."""
    if counts.max(initial=0) >= 1 << POSITION_BITS:
        raise ValueError(f"a node has {counts.max()} local steps; at most {(1 << POSITION_BITS) - 1}")
    node = np.repeat(np.arange(len(counts)), counts)
    position = np.arange(len(node)) - np.repeat(np.cumsum(counts) - counts, counts)
    ids = np.asarray(key.client_ids, np.uint64)[node] << np.uint64(POSITION_BITS)
    ids |= position.astype(np.uint64)
    return node, Key(key.seed, key.round, ids, key.step, key.stream).uniform((1,))[:, 0]


def permutations(key: Key, sizes: np.ndarray) -> np.ndarray:
    """Node-major blocks: block k (length n_k) is a uniform random permutation of range(n_k)."""
    node, u = _node_uniforms(key, sizes)
    return np.lexsort((u, node)) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def uniform_draws(key: Key, sizes: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Node-major blocks: block k holds steps[k] draws uniform in range(n_k), with replacement."""
    node, u = _node_uniforms(key, steps)
    return np.minimum((u * sizes[node]).astype(np.int64), sizes[node] - 1)


class Schedule:
    """A local pass listed step by step, computed once before the sequential loop.

    Node k (of `nodes`) visits its rows `order[start_k + j]`, j < steps[k], where `order`
    holds node-major blocks of lengths `block` (default `steps`; start_k = block offsets).
    Nodes are renumbered longest-first (`rank[k]`; `by_len` is the inverse), so the nodes
    still running at step j are ranks 0..count_j-1 and sample (j, rank r) sits at
    sample_ptr[j] + r. Step j's samples are `sample[sample_ptr[j]:sample_ptr[j+1]]` (rows of
    nodes.x) and their nonzeros ("visits") `pos[entry_ptr[j]:entry_ptr[j+1]]` (into x.data),
    owned by rank `own`.

    Local models are kept only on the (rank, feature) pairs a node touches: `pairs` holds
    the sorted keys rank * d + feature of the visited pairs (for full passes: every feature
    present on the node), `pair[v]` is visit v's pair index, `skipped[v]` the number of steps
    since the previous visit of that pair (or since the start), and `last[p]` the step after
    the pair's last visit. Memory O(n + visits).
    """

    def __init__(self, nodes: SparseNodes, order: np.ndarray, steps: np.ndarray,
                 block: np.ndarray | None = None):
        x, d, clients = nodes.x, nodes.dim, nodes.num_clients
        block = steps if block is None else block
        self.by_len = np.argsort(-steps, kind="stable")
        self.rank = np.empty(clients, np.int64)
        self.rank[self.by_len] = np.arange(clients)
        running = np.searchsorted(-steps[self.by_len], -np.arange(int(steps.max())), side="left")
        self.sample_ptr = np.concatenate([[0], np.cumsum(running)])
        node = np.repeat(np.arange(clients), steps)
        j = np.arange(len(node)) - np.repeat(np.cumsum(steps) - steps, steps)
        where = self.sample_ptr[j] + self.rank[node]
        self.sample = np.empty(len(node), np.int64)
        self.sample[where] = nodes.offsets[node] + order[np.repeat(np.cumsum(block) - block, steps) + j]
        owner = np.empty(len(node), np.int64)
        owner[where] = self.rank[node]
        lengths = np.diff(x.indptr)[self.sample]
        self.pos = ranges(x.indptr[self.sample], lengths)
        self.own = np.repeat(owner, lengths)
        self.entry_ptr = np.concatenate([[0], np.cumsum(lengths)])[self.sample_ptr]
        # pairs: one stable sort of the visits' keys (visits are in step order)
        keys = self.own * d + x.indices[self.pos]
        by_key = np.argsort(keys, kind="stable")
        sorted_keys = keys[by_key]
        first = np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]])
        self.pairs = sorted_keys[first]
        group = np.cumsum(first) - 1
        self.pair = np.empty(len(keys), np.int64)
        self.pair[by_key] = group
        step = np.repeat(np.arange(len(running)), np.diff(self.entry_ptr))[by_key]
        self.skipped = np.empty(len(keys), np.int64)
        self.skipped[by_key] = step - np.where(first, 0, np.concatenate([[0], step[:-1] + 1]))
        is_last = np.concatenate([first[1:], [True]])
        self.last = np.empty(len(self.pairs), np.int64)
        self.last[group[is_last]] = step[is_last] + 1
        self.pair_rank, self.pair_col = self.pairs // d, self.pairs % d

    def dense(self, values: np.ndarray, fill: np.ndarray) -> np.ndarray:
        """(C, d) in the nodes' original order: `fill` (C, d) or broadcastable, with the
        pairs set to `values`."""
        out = np.empty((len(self.rank), fill.shape[-1]))
        out[...] = fill
        out.reshape(-1)[self.by_len[self.pair_rank] * out.shape[1] + self.pair_col] = values
        return out


def svrg_pass(nodes: SparseNodes, order: np.ndarray, steps: np.ndarray, anchor: np.ndarray,
              drift: np.ndarray, h: np.ndarray, lam: float, mu: float = 0.0,
              scaled: bool = False, block: np.ndarray | None = None) -> np.ndarray:
    """Local SVRG-type passes of every node at once; returns u_k = w_k - anchor_k, (C, d).

    Node k runs `steps[k]` steps on its samples listed in `order` (node-major blocks of
    lengths `block`, default `steps`; see `Schedule`):

        w <- w - h_k ( s_k * [grad f_i(w) - grad f_i(anchor_k)] + mu (w - anchor_k) + drift_k )

    with s_k = S_k (`scaled`, FSVRG) or 1; `anchor` and `drift` are (d,) (shared) or (C, d).
    grad f_i(w) - grad f_i(a) = (l_i'(<x_i, w>) - l_i'(<x_i, a>)) x_i + lam (w - a).
    Everything fixed during the pass is gathered per visit up front; the loop only reads and
    writes the touched pairs. A coordinate node k never touches follows u <- (1 - c_k) u - h_k
    drift_kj from 0 for steps[k] steps (c_k = h_k (lam + mu)), a closed form per node.
    """
    x, y, d = nodes.x, nodes.y, nodes.dim
    if scaled and np.any(steps != nodes.sizes):
        raise ValueError("scaled (FSVRG) passes visit every sample of every node once: "
                         "steps must equal the node sizes")
    plan = Schedule(nodes, order, steps, block)
    own, cols = plan.own, x.indices[plan.pos].astype(np.int64)
    node = plan.by_len[own]  # original node index of every visit
    _, dl_anchor = logistic(margins(x, anchor, nodes.node_of_row()), y)
    vals = x.data[plan.pos]
    s = nodes.scale[plan.pos] if scaled else 1.0
    coef = h[node] * (s * lam + mu)  # c: u <- (1 - c) u - b between visits (c > 0 as lam > 0)
    push = h[node] * _at(drift, node, cols)  # b
    sample_grad = h[node] * s * vals  # times l'(w) - l'(anchor): the sparse part of the step
    # catch-up over the skipped steps u <- decay u + growth, then the step itself:
    # margin term vals * (anchor + u) = reach + slope * u_old, and u_new = hold * u_old + shift - ...
    t = plan.skipped * np.log1p(-coef)
    decay, growth = np.exp(t), push / coef * np.expm1(t)
    reach = vals * (_at(anchor, node, cols) + growth)
    slope = vals * decay
    hold, shift = (1.0 - coef) * decay, (1.0 - coef) * growth - push
    y_s, dl_a = y[plan.sample], dl_anchor[plan.sample]

    u = np.zeros(len(plan.pairs))
    for j in range(len(plan.sample_ptr) - 1):
        e = slice(plan.entry_ptr[j], plan.entry_ptr[j + 1])
        smp = slice(plan.sample_ptr[j], plan.sample_ptr[j + 1])
        f, o = plan.pair[e], own[e]
        old = u[f]
        z = np.bincount(o, weights=reach[e] + slope[e] * old, minlength=smp.stop - smp.start)
        dl = -y_s[smp] * expit(-y_s[smp] * z) - dl_a[smp]
        u[f] = hold[e] * old + shift[e] - sample_grad[e] * dl[o]
    # the remaining steps of every touched pair, then the untouched coordinates (s = 1)
    pair_node = plan.by_len[plan.pair_rank]
    s_pair = np.ones(len(plan.pairs))
    s_pair[plan.pair] = s  # every visit of a pair carries the same s_k^j
    u = _affine_steps(u, steps[pair_node] - plan.last, h[pair_node] * (s_pair * lam + mu),
                      h[pair_node] * _at(drift, pair_node, plan.pair_col))
    untouched = (h * _affine_steps(0.0, steps, h * (lam + mu), 1.0))[:, None] * drift
    return plan.dense(u, untouched)


# ---- hyperparameters ------------------------------------------------------------------------
class SVRGFamilyHyper(Hyper):
    """`client_lr` is the step size h; all nodes take part by default. `local_steps`,
    `batch_size` and `server_lr` are not used by this family."""

    client_lr: float = Field(1.0, gt=0, allow_inf_nan=False, description="step size h")
    clients_per_round: int | None = Field(None, ge=1, description="None = all nodes")


class NaiveHyper(SVRGFamilyHyper):
    local_steps: int | None = Field(None, ge=1, description="m; None = n_k steps on node k")


class DANEHyper(SVRGFamilyHyper):
    eta: float = Field(1.0, gt=0, allow_inf_nan=False, description="weight of grad f(w^t)")
    mu: float = Field(0.0, ge=0, allow_inf_nan=False, description="proximal weight")
    local_passes: int = Field(2, ge=1, description="SVRG passes of the inexact local solver")


class CoCoAHyper(SVRGFamilyHyper):
    client_lr: float = Field(1.0, gt=0, allow_inf_nan=False, description="not used (SDCA has no step)")
    clients_per_round: None = Field(None, description="CoCoA+ (sigma' = K) needs every node")
    local_passes: int = Field(1, ge=1, description="SDCA passes over the node's data per round")


# ---- algorithms -----------------------------------------------------------------------------
class SVRGFamily(Algorithm):
    """Shared parts: messages weighted by n_k; the state's model is `w`; a node's message
    without local work is its full gradient grad F_k(w) (C, d)."""

    Hyper = SVRGFamilyHyper
    supports = frozenset({"nodes"})

    def client_weights(self, problem, rows):
        return problem.train.sizes[rows].astype(float)

    def server_init(self, problem, params0):
        if not isinstance(problem, SparseTextLogReg):
            raise ValueError(f"algorithm {self.name!r} needs per-node sparse data (problem "
                             f"'sparse_text_logreg'), got problem {problem.name!r}")
        return {"w": copy(params0)["w"]}

    def output(self, problem, state):
        return {"w": state["w"]}

    def client_update(self, problem, payload, rows, key):
        return {"g": node_loss_grads(problem.train.take(rows), payload["w"], problem.lam)[1]}


class TwoExchange(SVRGFamily):
    """Exchange 1 (phase 0): grad f(w^t); exchange 2 (phase 1): `local_work` from w^t, then
    the server step `combine`."""

    exchanges_per_round = 2

    def server_init(self, problem, params0):
        return {**super().server_init(problem, params0), "phase": 0}

    def broadcast(self, state):
        if state["phase"] == 0:
            return {"w": state["w"]}
        return {"w": state["w"], "g": state["g"]}

    def client_update(self, problem, payload, rows, key):
        if "g" not in payload:
            return super().client_update(problem, payload, rows, key)
        return self.local_work(problem, problem.train.take(rows), payload, key)

    def server_update(self, problem, state, mean, rnd):
        if state["phase"] == 0:
            return {"w": state["w"], "g": mean["g"], "phase": 1}
        return {"w": state["w"] + self.combine(problem, mean), "phase": 0}

    @abc.abstractmethod
    def local_work(self, problem, nodes: SparseNodes, payload: dict, key: Key) -> dict:
        """Messages of the local passes of `nodes` (the chunk's data) from payload["w"]."""

    def combine(self, problem, mean) -> np.ndarray:
        """Server step from the n_k-weighted mean message."""
        return mean["delta"] / mean["norm"]

    @staticmethod
    def average(u: np.ndarray, sizes: np.ndarray, weighting: str) -> dict:
        """Messages whose ratio of n_k-weighted means is the uniform / n_k-weighted mean of u."""
        if weighting == "uniform":
            return {"delta": u / sizes[:, None], "norm": 1.0 / sizes}
        return {"delta": u, "norm": np.ones(len(sizes))}


class GD(SVRGFamily):
    """Distributed gradient descent: w <- w - h grad f(w), one exchange per round; grad f is
    the n_k-weighted mean of the nodes' gradients (`weighting` is not used)."""

    name = "gd"

    def broadcast(self, state):
        return {"w": state["w"]}

    def server_update(self, problem, state, mean, rnd):
        return {"w": state["w"] - self.hp.client_lr * mean["g"]}


class FSVRG(TwoExchange):
    """FSVRG (Alg. 4): node k makes one pass over a random permutation of its n_k samples,
        w_k <- w_k - h_k ( S_k [grad f_i(w_k) - grad f_i(w^t)] + grad f(w^t) ),  h_k = h / n_k;
    server: w^{t+1} = w^t + A sum_k (n_k/n)(w_k - w^t). S_k, A from `sparsity_scalings`
    (computed once with the problem). `weighting` is not used (the n_k/n weights are Alg. 4's).
    """

    name = "fsvrg"

    def local_work(self, problem, nodes, payload, key):
        order = permutations(key.with_step(0, PERMUTATION), nodes.sizes)
        u = svrg_pass(nodes, order, nodes.sizes, payload["w"], payload["g"],
                      self.hp.client_lr / nodes.sizes, problem.lam, scaled=True)
        return {"delta": u}

    def combine(self, problem, mean):
        return problem.aggregation * mean["delta"]


class NaiveFSVRG(TwoExchange):
    """Naive FSVRG (Alg. 3): node k makes m steps on samples drawn uniformly (with
    replacement) from its data, w_k <- w_k - h (grad f_i(w_k) - grad f_i(w^t) + grad f(w^t));
    server: w^{t+1} = w^t + (1/K) sum_k (w_k - w^t) (`weighting: samples`: n_k/n weights).
    m = `local_steps`; None means m_k = n_k (one epoch's worth, comparable with FSVRG)."""

    name = "fsvrg_naive"
    Hyper = NaiveHyper

    def local_work(self, problem, nodes, payload, key):
        m = self.hp.local_steps
        steps = nodes.sizes if m is None else np.full(nodes.num_clients, m)
        order = uniform_draws(key.with_step(0, BATCH), nodes.sizes, steps)
        u = svrg_pass(nodes, order, steps, payload["w"], payload["g"],
                      np.full(nodes.num_clients, self.hp.client_lr), problem.lam)
        return self.average(u, nodes.sizes, self.hp.weighting)


class DANE(TwoExchange):
    """DANE: node k approximately solves
        min_w F_k(w) - (grad F_k(w^t) - eta grad f(w^t))^T w + (mu/2) ||w - w^t||^2
    by `local_passes` SVRG passes (step h / n_k, random permutation each pass, the SVRG
    anchor moved to the pass's result); the server averages the w_k (`weighting`).

    With anchor a (first pass a = w^t) the subproblem's variance-reduced gradient is
        grad f_i(w) - grad f_i(a) + [grad F_k(a) - grad F_k(w^t) + eta grad f(w^t) + mu (a - w^t)]
        + mu (w - a),
    so each pass is `svrg_pass` with that bracket as the (per-node) drift."""

    name = "dane"
    Hyper = DANEHyper

    def local_work(self, problem, nodes, payload, key):
        hp, w = self.hp, payload["w"]
        h = hp.client_lr / nodes.sizes
        anchor, drift = w, hp.eta * payload["g"]
        grads_t = node_loss_grads(nodes, w, problem.lam)[1] if hp.local_passes > 1 else None
        for p in range(hp.local_passes):
            order = permutations(key.with_step(p, PERMUTATION), nodes.sizes)
            anchor = anchor + svrg_pass(nodes, order, nodes.sizes, anchor, drift, h,
                                        problem.lam, hp.mu)
            if p + 1 < hp.local_passes:
                drift = (node_loss_grads(nodes, anchor, problem.lam)[1] - grads_t
                         + hp.eta * payload["g"] + hp.mu * (anchor - w))
        return self.average(anchor - w, nodes.sizes, hp.weighting)


def sdca_logistic(b: np.ndarray, yz: np.ndarray, q: np.ndarray, tol: float = 1e-12,
                  max_iter: int = 200) -> np.ndarray:
    """Exact SDCA coordinate step for the logistic loss, vectorized.

    With b = y alpha in [0, 1] the dual term is -(b log b + (1-b) log(1-b)); maximizing
    -ent(b') - (b' - b) y z - (q/2)(b' - b)^2 over b' gives, with t = logit(b'),
        F(t) = t + q (sigmoid(t) - b) + y z = 0,
    increasing in t with its root in [-yz - q(1-b), -yz + q b]. Solved by safeguarded Newton
    (Numerical Recipes' rtsafe): bisection whenever Newton would leave the bracket or does
    not halve the step, warm-started at the previous b (or at -yz, the q = 0 root).
    Every entry stops on its own, so results do not depend on how entries are batched.
    """
    lo, hi = -yz - q * (1.0 - b), -yz + q * b
    inside = (b > 0) & (b < 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.clip(np.where(inside, np.log(b) - np.log1p(-b), -yz), lo, hi)
    step_before = hi - lo
    todo = np.ones(len(t), bool)
    for _ in range(max_iter):
        sig = expit(t)
        f = t + q * (sig - b) + yz
        slope = 1.0 + q * sig * (1.0 - sig)
        lo, hi = np.where(f < 0, t, lo), np.where(f > 0, t, hi)
        newton = t - f / slope
        bisect = (newton < lo) | (newton > hi) | (np.abs(2.0 * f) > np.abs(step_before * slope))
        new = np.where(bisect, 0.5 * (lo + hi), newton)
        moved = np.abs(new - t)
        step_before = np.where(todo, moved, step_before)
        t = np.where(todo, new, t)
        todo &= moved > tol * (1.0 + np.abs(t))
        if not todo.any():
            break
    return expit(t)


class CoCoAPlus(SVRGFamily):
    """CoCoA+ (Ma et al. 2015) with local SDCA, adding (gamma = 1, sigma' = K).

    Dual variables alpha_i (b_i = y_i alpha_i in [0, 1]), w(alpha) = (1/(lam n)) sum_i alpha_i x_i.
    Node k runs `local_passes` SDCA passes over random permutations of its samples on
        max_{d alpha} -(1/n) sum_{i in P_k} l_i*(-alpha_i - d alpha_i) - (1/n) w^T A_k d alpha
                      - (lam sigma'/2) ||A_k d alpha / (lam n)||^2,
    i.e. exact coordinate steps (`sdca_logistic`) against v_k = w + sigma' dw_k with
    q_i = sigma' ||x_i||^2 / (lam n); it sends dw_k = A_k d alpha / (lam n) and the server
    adds w += gamma sum_k dw_k. Starts from alpha = 0, i.e. w = 0 (params0 is not used).

    The duals live on the nodes, as in the paper: the engine's messages are fixed-size
    per-node sums, so alpha cannot travel through them. They are kept in the node data's
    `memory` (per shard on Ray actors), keyed by a run token that the server sends in the
    broadcast (one float), so concurrent runs on one problem object do not mix.
    SDCA steps are sequential per node but vectorized across nodes like `svrg_pass`.
    """

    name = "cocoa_plus"
    Hyper = CoCoAHyper

    def server_init(self, problem, params0):
        super().server_init(problem, params0)  # checks the problem
        run = float(uuid.uuid4().int >> 76)  # 52 bits: exact as a float
        return {"w": np.zeros(problem.train.dim), "run": run, "sigma": float(problem.num_clients),
                "n": float(problem.total_samples)}

    def broadcast(self, state):
        return {"w": state["w"], "run": state["run"], "sigma": state["sigma"], "n": state["n"]}

    def server_update(self, problem, state, mean, rnd):
        # mean["delta"] = sum_k n_k (dw_k / n_k) / n; gamma = 1
        return {**state, "w": state["w"] + state["n"] * mean["delta"]}

    def _duals(self, problem, run: float) -> np.ndarray:
        memory = problem.train.memory
        if run not in memory:
            while len(memory) >= MEMORY_RUNS:
                memory.pop(next(iter(memory)))
            memory[run] = np.zeros(problem.train.x.shape[0])
        return memory[run]

    def client_update(self, problem, payload, rows, key):
        nodes = problem.train.take(rows)
        b_all = self._duals(problem, payload["run"])
        global_rows = problem.train.rows_of(rows)
        b = b_all[global_rows]
        w, sigma = payload["w"], payload["sigma"]
        x, y = nodes.x, nodes.y
        scale = sigma / (problem.lam * payload["n"])  # sigma' / (lam n)
        sqnorm = np.asarray(x.multiply(x).sum(axis=1)).ravel()
        v = None  # v_k = w + sigma' dw_k on the node's (rank, feature) pairs
        for p in range(self.hp.local_passes):
            order = permutations(key.with_step(p, PERMUTATION), nodes.sizes)
            plan = Schedule(nodes, order, nodes.sizes)  # full passes: the same pairs every pass
            v = w[plan.pair_col] if v is None else v
            vals = x.data[plan.pos]
            for j in range(len(plan.sample_ptr) - 1):
                e = slice(plan.entry_ptr[j], plan.entry_ptr[j + 1])
                sample = plan.sample[plan.sample_ptr[j]:plan.sample_ptr[j + 1]]
                f, o = plan.pair[e], plan.own[e]
                z = np.bincount(o, weights=vals[e] * v[f], minlength=len(sample))
                new = sdca_logistic(b[sample], y[sample] * z, scale * sqnorm[sample])
                step = y[sample] * (new - b[sample])  # d alpha_i
                b[sample] = new
                v[f] += scale * step[o] * vals[e]
        b_all[global_rows] = b
        dw = plan.dense((v - w[plan.pair_col]) / sigma, np.zeros(nodes.dim))
        return {"delta": dw / nodes.sizes[:, None]}


ALL: tuple[type[Algorithm], ...] = (GD, FSVRG, NaiveFSVRG, DANE, CoCoAPlus)
