"""FSVRG and friends (fco_ray/algorithms/svrg.py): the compiled lazy passes
(fco_ray.ops.kernels_sparse) against plain per-sample dense loops, each algorithm against its
formulas, the paper's properties, and the E7 claims at reduced scale."""
import copy

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import expit

import fco_ray
from fco_ray import ConfigError
from fco_ray.algorithms import ALGORITHMS
from fco_ray.backends import LocalBackend
from fco_ray.backends.local import ClientStates, add_sums, weighted_sum
from fco_ray.core.config import parse_problem
from fco_ray.core.group import make_group
from fco_ray.data.stores import SparseNodes
from fco_ray.data.text_generator import generate_text_nodes, reshuffle_nodes
from fco_ray.ops.kernels_sparse import sdca_step
from fco_ray.ops.random import BATCH, PERMUTATION, Key
from fco_ray.problems import build_problem
from fco_ray.problems.nodes import LocalPasses
from fco_ray.problems.text import SparseTextLogReg

from tests.conftest import text_problem
from tests.conftest import text_problem
from tests.helpers import run_one, small_lasso

FAMILY = ["gd", "fsvrg", "fsvrg_naive", "dane", "cocoa_plus"]


def make(name, **hp):
    cls = ALGORITHMS[name]
    if name == "cocoa_plus":
        hp.pop("client_lr", None)  # local SDCA has no step size
    return cls(cls.Hyper(name=name, **hp))


def run(problem, name, rounds, w0=None, chunk_size=1024, seed=0, **hp):
    """Rounds through the engine; returns (final w, metrics rows)."""
    if w0 is not None:
        problem = copy.copy(problem)
        problem.init_params = lambda rng: {"w": w0.copy()}
    algorithm = make(name, **hp)
    result = run_one(problem, algorithm, LocalBackend(problem, chunk_size), rounds=rounds,
                        eval_every=1, seed=seed)
    assert result.status == "finished"
    return algorithm.output(problem, result.state)["w"], result.records


def dense_rows(nodes):
    return nodes.x.toarray()


def dl(z, y):
    return -y * expit(-y * z)


def brute_scaling(nodes):
    """S_k (dense, 1 where feature absent) and a from the definitions, by counting."""
    x = dense_rows(nodes) != 0
    n, k = x.shape[0], nodes.num_clients
    phi = x.sum(0) / n
    s = np.ones((k, nodes.dim))
    omega = np.zeros(nodes.dim)
    for node in range(k):
        rows = x[nodes.offsets[node]:nodes.offsets[node + 1]]
        phi_k = rows.sum(0) / nodes.sizes[node]
        s[node, phi_k > 0] = phi[phi_k > 0] / phi_k[phi_k > 0]
        omega += phi_k > 0
    return s, np.where(omega > 0, k / np.maximum(omega, 1), 1.0)


def keyed_uniforms(key, stream, step, node_id, count):
    """The uniforms a node's pass draws, from `Key` (NumPy; independent of the kernels):
    one per position, keyed by (seed, round, step, stream, node_id << 24 | position)."""
    ids = (np.uint64(node_id) << np.uint64(24)) | np.arange(count, dtype=np.uint64)
    return Key(key.seed, key.round, ids, step, stream).uniform((1,))[:, 0]


def permutation(key, step, node_id, size):
    return np.argsort(keyed_uniforms(key, PERMUTATION, step, node_id, size), kind="stable")


def draws(key, node_id, size, steps):
    return np.minimum((keyed_uniforms(key, BATCH, 0, node_id, steps) * size).astype(np.int64), size - 1)


def reference_pass(nodes, orders, anchor, drift, h, lam, mu, s):
    """w <- w - h_k (s_k [grad f_i(w) - grad f_i(a_k)] + mu (w - a_k) + drift_k), node by node,
    sample by sample, on dense vectors; node k visits its rows orders[k]. Returns w_k - a_k."""
    x = dense_rows(nodes)
    out = np.zeros((nodes.num_clients, nodes.dim))
    for k in range(nodes.num_clients):
        a = anchor[k]
        w = a.copy()
        for j in orders[k]:
            i = nodes.offsets[k] + j
            diff = (dl(x[i] @ w, nodes.y[i]) - dl(x[i] @ a, nodes.y[i])) * x[i] + lam * (w - a)
            w = w - h[k] * (s[k] * diff + mu * (w - a) + drift[k])
        out[k] = w - a
    return out


def reference_dane(problem, rows, w, g, h, eta, mu, passes, key):
    """DANE's local solver by `reference_pass`: anchor moved after each pass, drift
    grad F_k(a) - grad F_k(w) + eta g + mu (a - w). Returns w_k - w (len(rows), d)."""
    nodes = problem.train.take(rows)
    k = len(rows)
    anchor, drift = np.tile(w, (k, 1)), np.tile(eta * g, (k, 1))
    grads_w = grads_of_nodes(problem, w)[rows]
    for p in range(passes):
        orders = [permutation(key, p, key.client_ids[c], nodes.sizes[c]) for c in range(k)]
        anchor = anchor + reference_pass(nodes, orders, anchor, drift, h, problem.lam, mu,
                                         np.ones((k, nodes.dim)))
        drift = (grads_of_nodes_stacked(problem, anchor, rows) - grads_w + eta * g
                 + mu * (anchor - w))
    return anchor - w


# ---- the vectorized machinery ---------------------------------------------------------------
def test_sparsity_scalings_match_their_definitions(tiny):
    s, a = brute_scaling(tiny.train)
    node = np.repeat(tiny.train.node_of_row(), np.diff(tiny.train.x.indptr))
    np.testing.assert_allclose(tiny.train.scale, s[node, tiny.train.x.indices], rtol=1e-12)
    np.testing.assert_allclose(tiny.aggregation, a, rtol=1e-12)


@pytest.mark.parametrize("case", ["fsvrg", "naive", "naive_partial", "dane"])
def test_compiled_passes_equal_per_sample_loops(tiny, case):
    """`node_pass_sum` (compiled, lazy, summed into one vector) = dense per-sample loops,
    node by node, with the keyed orders drawn independently through `Key`."""
    p, rng = copy.copy(tiny), np.random.default_rng(0)
    p.lam = 0.05  # large enough that the lazy closed forms matter
    rows = np.array([4, 0, 2, 5])
    nodes, k, d = p.train.take(rows), len(rows), p.train.dim
    key = Key(5, 2, rows + 100)  # global ids differ from the local rows, as on a shard
    w, g = rng.normal(size=d), 0.1 * rng.normal(size=d)
    weights = rng.uniform(0.5, 2.0, k)
    h = rng.uniform(0.2, 1.5, k)
    if case == "dane":
        eta, mu, passes = 0.7, 0.3, 3
        got = p.node_pass_sum(rows, key, w, g, weights, LocalPasses(h=h, passes=passes, eta=eta, mu=mu))
        want = weights @ reference_dane(p, rows, w, g, h, eta, mu, passes, key)
    else:
        scaled = case == "fsvrg"
        steps = None if scaled else rng.integers(1, 45, k) if case == "naive_partial" else nodes.sizes
        got = p.node_pass_sum(rows, key, w, g, weights, LocalPasses(h=h, steps=steps, scaled=scaled))
        orders = [permutation(key, 0, key.client_ids[c], nodes.sizes[c]) if scaled
                  else draws(key, key.client_ids[c], nodes.sizes[c], steps[c]) for c in range(k)]
        s = brute_scaling(p.train)[0][rows] if scaled else np.ones((k, d))
        want = weights @ reference_pass(nodes, orders, np.tile(w, (k, 1)), np.tile(g, (k, 1)), h,
                                        p.lam, 0.0, s)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14 * np.abs(want).max())
    assert np.abs(want).max() > 1e-3  # the passes did move


def test_gradient_sum_equals_the_node_gradients(tiny):
    rows = np.array([3, 1])
    w = np.random.default_rng(2).normal(size=tiny.train.dim)
    weights = np.array([0.3, 2.0])
    want = weights @ grads_of_nodes(tiny, w)[rows]
    np.testing.assert_allclose(tiny.node_gradient_sum(rows, w, weights), want, rtol=1e-12, atol=1e-15)


def test_permutations_and_draws_are_keyed_by_node(tiny):
    """The kernels' orders are the `Key` draws: changing another node, the round or the
    sharding changes nothing for a node; the permutation is one; draws cover small nodes."""
    sizes = np.array([3, 7, 1, 5])
    key = Key(1, 4, np.array([10, 11, 12, 13]))
    perms = [permutation(key, 0, i, n) for i, n in zip(key.client_ids, sizes)]
    for block, n in zip(perms, sizes):
        assert sorted(block) == list(range(n))
    assert not np.array_equal(permutation(Key(1, 5, key.client_ids), 0, 11, 7), perms[1])
    assert not np.array_equal(permutation(key, 1, 11, 7), perms[1])  # a second pass: a new one
    for i, n in zip(key.client_ids, sizes):
        assert set(draws(key, i, n, 50)) == set(range(n))  # 50 draws hit every one of <= 7 values
    # the compiled pass of a node alone equals its share of a pass over several nodes
    w, g = np.full(tiny.train.dim, 0.1), np.full(tiny.train.dim, 0.01)
    ones = np.ones(tiny.num_clients)
    all_nodes = np.arange(tiny.num_clients)
    both = tiny.node_pass_sum(all_nodes, Key(1, 4, all_nodes), w, g, ones, LocalPasses(h=ones))
    alone = sum(tiny.node_pass_sum([r], Key(1, 4, np.array([r])), w, g, ones[:1], LocalPasses(h=ones[:1]))
                for r in all_nodes)
    np.testing.assert_allclose(both, alone, rtol=1e-13, atol=1e-15)


def test_sdca_step_solves_the_one_dimensional_dual_problem():
    rng = np.random.default_rng(0)
    # the first entries: bracket ends, and a start where plain Newton cycles forever
    b = np.concatenate([[0.0, 1.0, 0.5, 0.0], rng.uniform(0, 1, 40)])
    yz = np.concatenate([[3.0, -2.0, 0.0, -4.726], rng.normal(0, 4, 40)])
    q = np.concatenate([[5.0, 1e4, 0.1, 20.0], 10 ** rng.uniform(-2, 4, 40)])
    got = [sdca_step(bi, yzi, qi) for bi, yzi, qi in zip(b, yz, q)]
    for bi, yzi, qi, gi in zip(b, yz, q, got):
        f = lambda t: t + qi * (expit(t) - bi) + yzi  # noqa: E731  stationarity in logit space
        t = brentq(f, -yzi - qi - 1, -yzi + qi + 1, xtol=1e-14)
        assert abs(gi - expit(t)) < 1e-12


# ---- each algorithm against its formulas ----------------------------------------------------
def grads_of_nodes(problem, w):
    x = dense_rows(problem.train)
    out = []
    for k in range(problem.num_clients):
        rows = slice(problem.train.offsets[k], problem.train.offsets[k + 1])
        out.append(x[rows].T @ dl(x[rows] @ w, problem.train.y[rows]) / problem.train.sizes[k] + problem.lam * w)
    return np.array(out)


def test_gd_and_fsvrg_follow_their_formulas(tiny):
    p, h, seed, rounds = tiny, 8.0, 3, 2
    n_k, n = p.train.sizes, p.train.x.shape[0]
    s, a = brute_scaling(p.train)
    ids = np.arange(p.num_clients)

    w = np.zeros(p.train.dim)
    for _ in range(rounds):
        w = w - h * (n_k / n) @ grads_of_nodes(p, w)
    np.testing.assert_allclose(run(p, "gd", rounds, client_lr=h, seed=seed)[0], w, rtol=1e-12)

    w = np.zeros(p.train.dim)
    for rnd in range(rounds):
        g = (n_k / n) @ grads_of_nodes(p, w)
        key = Key(seed, rnd, ids)
        orders = [permutation(key, 0, i, n_i) for i, n_i in zip(ids, n_k)]
        u = reference_pass(p.train, orders, np.tile(w, (len(ids), 1)), np.tile(g, (len(ids), 1)),
                           h / n_k, p.lam, 0.0, s)
        w = w + a * ((n_k / n) @ u)
    np.testing.assert_allclose(run(p, "fsvrg", rounds, client_lr=h, seed=seed)[0], w, rtol=1e-11)


def test_naive_fsvrg_follows_its_formula(tiny):
    p, h, m, seed = tiny, 0.5, 7, 4
    n_k, n = p.train.sizes, p.train.x.shape[0]
    ids = np.arange(p.num_clients)
    w = np.zeros(p.train.dim)
    for rnd in range(2):
        g = (n_k / n) @ grads_of_nodes(p, w)
        key = Key(seed, rnd, ids)
        orders = [draws(key, i, n_i, m) for i, n_i in zip(ids, n_k)]
        u = reference_pass(p.train, orders, np.tile(w, (len(ids), 1)), np.tile(g, (len(ids), 1)),
                           np.full(len(ids), h), p.lam, 0.0, np.ones((len(ids), p.train.dim)))
        w = w + u.mean(axis=0)  # 1/K sum_k (w_k - w^t)
    got = run(p, "fsvrg_naive", 2, client_lr=h, local_steps=m, seed=seed)[0]
    np.testing.assert_allclose(got, w, rtol=1e-11)


def test_dane_local_solver_solves_the_dane_subproblem(tiny):
    p = tiny
    w = np.random.default_rng(1).normal(0, 0.3, p.train.dim)
    g = p.full_loss_grad({"w": w})[1]["w"]
    eta, mu = 0.7, 0.2
    algorithm = make("dane", client_lr=4.0, eta=eta, mu=mu, local_passes=60, weighting="samples")
    payload = {"w": w, "g": g, "phase": 1.0}
    u = np.array([algorithm.local_work(p, [k], payload, Key(0, 0, np.array([k])), np.ones(1))["delta"]
                  for k in range(p.num_clients)])  # weight 1, `samples`: node k's w_k - w
    w_k = w + u
    # optimality of F_k(v) - (grad F_k(w) - eta g)^T v + mu/2 ||v - w||^2 at v = w_k
    residual = grads_of_nodes_stacked(p, w_k) - grads_of_nodes(p, w) + eta * g + mu * u
    assert np.abs(residual).max() < 1e-8
    assert np.abs(u).max() > 1e-2  # it did move


def grads_of_nodes_stacked(problem, w_stack, rows=None):
    rows = range(len(w_stack)) if rows is None else rows
    return np.array([grads_of_nodes(problem, w)[k] for k, w in zip(rows, w_stack)])


def dual_value(problem, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = np.where((b > 0) & (b < 1), b * np.log(b) + (1 - b) * np.log1p(-b), 0.0)
    n = len(b)
    w = problem.train.x.T @ (problem.train.y * b) / (problem.lam * n)
    return -ent.sum() / n - 0.5 * problem.lam * w @ w, w


def test_cocoa_plus_keeps_w_of_alpha_and_its_dual_ascends(small):
    p = small
    algorithm = make("cocoa_plus")
    backend = LocalBackend(p, chunk_size=7)  # duals must survive chunking
    state = algorithm.server_init(p, {"w": np.zeros(p.train.dim)})
    duals, primals = [], []
    for rnd in range(4):
        payload = algorithm.broadcast(state)
        ids = algorithm.select_clients(0, rnd, p.num_clients)
        total, weight = backend.map_clients(make_group([algorithm]), payload, ids, Key(0, rnd, ids))
        state = algorithm.server_update(p, state, {k: v / weight for k, v in total.items()}, rnd)
        states = backend.states.by_row  # the duals: client state kept by the backend
        assert sorted(states) == list(range(p.num_clients))
        b = np.concatenate([states[k] for k in range(p.num_clients)])
        assert b.min() >= 0 and b.max() <= 1
        value, w_alpha = dual_value(p, b)
        np.testing.assert_allclose(state["w"], w_alpha, rtol=1e-9, atol=1e-12)
        duals.append(value)
        primals.append(p.full_loss_grad({"w": state["w"]})[0])
    assert np.all(np.diff(duals) > 0)
    assert all(dv <= pv + 1e-12 for dv, pv in zip(duals, primals))  # weak duality
    assert primals[-1] - duals[-1] < primals[0] - duals[0]


# ---- the paper's properties -----------------------------------------------------------------
@pytest.mark.parametrize("name,h", [("fsvrg", 30.0), ("fsvrg_naive", 0.3), ("dane", 30.0), ("gd", 4.0)])
def test_started_at_the_optimum_stays_there(small, name, h):
    w_star = small.optimum.w
    w, rows = run(small, name, 3, w0=w_star, client_lr=h)
    assert max(abs(r["suboptimality"]) for r in rows) < 1e-12
    np.testing.assert_allclose(w, w_star, atol=1e-9)


def test_fsvrg_with_all_data_on_one_node_converges_in_a_handful_of_rounds(small):
    x, y = small.train.x, small.train.y
    one = SparseTextLogReg.from_nodes(SparseNodes(x, y, [x.shape[0]]), small.val)
    np.testing.assert_allclose(one.aggregation, 1.0)
    np.testing.assert_allclose(one.train.scale, 1.0)
    _, rows = run(one, "fsvrg", 6, client_lr=float(x.shape[0]))
    sub = [r["suboptimality"] for r in rows]
    assert sub[6] < 1e-6 * sub[0]


def test_naive_and_fsvrg_agree_on_iid_balanced_data():
    train, test = generate_text_nodes(seed=2, clients=10, min_samples=200, max_samples=200, dim=300,
                                      words_per_doc=10)
    iid = SparseTextLogReg.from_nodes(reshuffle_nodes(train, 0), test)
    h, n_k = 100.0, 200
    a = np.array([r["suboptimality"] for r in run(iid, "fsvrg", 5, client_lr=h)[1]])
    b = np.array([r["suboptimality"] for r in run(iid, "fsvrg_naive", 5, client_lr=h / n_k)[1]])
    assert a[-1] < 0.25 * a[0]
    assert np.max(np.abs(np.log(a[1:] / b[1:]))) < 0.05


@pytest.mark.parametrize("name,h", [("fsvrg", 30.0), ("fsvrg_naive", 0.3), ("dane", 30.0),
                                    ("gd", 8.0), ("cocoa_plus", 1.0)])
def test_every_method_descends_and_ignores_chunking(small, name, h):
    w1, rows = run(small, name, 3, chunk_size=1024, client_lr=h)
    w2, _ = run(small, name, 3, chunk_size=6, client_lr=h)
    np.testing.assert_allclose(w1, w2, rtol=1e-12, atol=1e-15)
    assert np.all(np.diff([r["suboptimality"] for r in rows]) < 0)


@pytest.mark.parametrize("name", ["fsvrg", "cocoa_plus"])
def test_actor_shards_give_the_local_result(small, name):
    """What a Ray backend does: shards = problem.subset(rows), partial sums added."""
    algorithm = make(name, client_lr=30.0)
    shards = [small.subset(rows) for rows in np.array_split(np.arange(small.num_clients), 3)]
    state_l = algorithm.server_init(small, {"w": np.zeros(small.train.dim)})
    state_s = dict(state_l)
    backend = LocalBackend(small)
    shard_states = [ClientStates() for _ in shards]  # each shard keeps its own client state
    for rnd in range(2):
        for _ in range(algorithm.exchanges_per_round):
            ids = np.arange(small.num_clients)
            total, weight = backend.map_clients(make_group([algorithm]), algorithm.broadcast(state_l), ids, Key(0, rnd, ids))
            state_l = algorithm.server_update(small, state_l, {k: v / weight for k, v in total.items()}, rnd)
            payload, parts, start = algorithm.broadcast(state_s), [], 0
            for shard, states in zip(shards, shard_states):
                gids = np.arange(start, start + shard.num_clients)
                parts.append(weighted_sum(make_group([algorithm]), shard, payload, np.arange(shard.num_clients),
                                          Key(0, rnd, gids), states))
                start += shard.num_clients
            total, weight = add_sums(parts)
            state_s = algorithm.server_update(small, state_s, {k: v / weight for k, v in total.items()}, rnd)
    np.testing.assert_allclose(state_s["w"], state_l["w"], rtol=1e-12, atol=1e-15)


def test_rounds_count_both_exchanges(small):
    df = fco_ray.run({"problem": {"name": "custom"}, "algorithm": {"name": "fsvrg", "client_lr": 30.0},
                      "rounds": 2, "eval_every": 1}, problem=small)
    d, k = small.train.dim, small.num_clients
    assert df["floats_up"].iloc[-1] == 2 * d * k  # node gradients, then local deltas
    assert df["floats_down"].iloc[-1] == (3 * d + 2) * k  # (w, phase), then (w, grad f, phase)
    assert {"train_loss", "suboptimality", "test_error"} <= set(df.columns)


def test_bad_input_is_rejected_clearly(small):
    with pytest.raises(ValueError, match="sparse_text_logreg"):
        make("fsvrg").server_init(small_lasso(), {"w": np.zeros(20), "b": np.zeros(())})
    with pytest.raises(ConfigError, match="clients_per_round"):
        fco_ray.run({"problem": {"name": "custom"}, "algorithm": {"name": "cocoa_plus", "clients_per_round": 5},
                     "rounds": 1}, problem=small)
    with pytest.raises(ConfigError, match="local_passes"):
        fco_ray.run({"problem": {"name": "custom"}, "algorithm": {"name": "dane", "local_passes": 0},
                     "rounds": 1}, problem=small)


# ---- E7 at reduced scale ---------------------------------------------------------------------
E7_SMALL = {"name": "sparse_text_logreg", "clients": 100, "min_samples": 30, "max_samples": 1000,
            "dim": 1000, "words_per_doc": 15,
            # the generator's settings before its calibration to the paper's data statistics
            # (sweeps/e7_fsvrg_uncalibrated.yaml): the claims below are those recorded on them
            "topic_concentration": 0.1, "zipf_exponent": 1.0, "signal": 3.0, "author_bias": 1.0,
            "topic_signal": 0.0, "positive_share": None}


def rounds_to_optimal_test_error(rows, target):
    hits = [r["round"] for r in rows if r["test_error"] <= target]
    return hits[0] if hits else None


def test_e7_fsvrg_beats_gd_and_reshuffling_changes_little():
    p = build_problem(parse_problem(E7_SMALL), 0)
    q = build_problem(parse_problem({**E7_SMALL, "reshuffle": True}), 0)
    np.testing.assert_array_equal(p.train.sizes, q.train.sizes)
    opt = p.optimum
    q.__dict__["optimum"] = opt  # same samples, same objective: one L-BFGS solve
    target, rounds = opt.test_error + 0.01, 25  # within 1 percentage point of OPT
    fsvrg = run(p, "fsvrg", rounds, client_lr=300.0)[1]
    fsvrgr = run(q, "fsvrg", rounds, client_lr=300.0)[1]
    r_fsvrg, r_fsvrgr = (rounds_to_optimal_test_error(r, target) for r in (fsvrg, fsvrgr))
    assert r_fsvrg is not None and r_fsvrg <= 12
    for h in (8.0, 16.0, 32.0, 64.0):  # GD at every step size up to the largest stable one
        r_gd = rounds_to_optimal_test_error(run(p, "gd", rounds, client_lr=h)[1], target)
        assert r_gd is None or r_gd > r_fsvrg
    assert r_fsvrgr is not None and abs(r_fsvrgr - r_fsvrg) <= 4
    sub_p = np.array([r["suboptimality"] for r in fsvrg[1:16]])
    sub_q = np.array([r["suboptimality"] for r in fsvrgr[1:16]])
    assert np.max(np.abs(np.log10(sub_p / sub_q))) < 0.5  # within a factor ~3 on log-scale plots


def test_fsvrg_rejects_a_batch_size_it_does_not_use(small):
    """`batch_size` is not a hyperparameter of the family: a clear config error naming the
    key (it used to raise AttributeError on the sparse store), and runs without it work."""
    cfg = {"problem": {"name": "custom"}, "rounds": 1, "eval_every": 1}
    plain = fco_ray.run({**cfg, "algorithm": {"name": "fsvrg", "client_lr": 30.0}}, problem=small)
    assert plain.attrs["status"] == "finished"
    with pytest.raises(fco_ray.ConfigError, match="unknown key 'algorithm.batch_size'"):
        fco_ray.run({**cfg, "algorithm": {"name": "fsvrg", "client_lr": 30.0, "batch_size": None}},
                    problem=small)


def test_client_state_is_per_run_and_kept_by_the_backend(small):
    """CoCoA+'s duals live in the backend's store, not in the problem: a second run on the
    same backend and problem starts from alpha = 0 again and repeats the first."""
    algorithm = make("cocoa_plus")
    backend = LocalBackend(small)
    first = run_one(small, algorithm, backend, rounds=2, eval_every=1, seed=0)
    assert len(backend.states) == small.num_clients
    second = run_one(small, algorithm, backend, rounds=2, eval_every=1, seed=0)
    assert [r["train_loss"] for r in first.records] == [r["train_loss"] for r in second.records]
    assert not any(isinstance(v, dict) for v in vars(small.train).values())  # nothing stored there


@pytest.mark.ray
def test_ray_actors_give_the_local_result(small, ray_cluster):
    """Real actors (pickled shards), every algorithm of the family: the compiled passes give
    the local numbers; CoCoA+'s duals live on the actors between rounds."""
    for name, h in (("cocoa_plus", None), ("fsvrg", 30.0), ("fsvrg_naive", 0.3), ("dane", 30.0),
                    ("gd", 8.0)):
        algorithm = {"name": name} if h is None else {"name": name, "client_lr": h}
        cfg = {"problem": {"name": "custom"}, "algorithm": algorithm, "rounds": 3, "eval_every": 1}
        local = fco_ray.run(cfg, problem=small)
        remote = fco_ray.run({**cfg, "backend": {"name": "ray", "actors": 2}}, problem=small)
        np.testing.assert_allclose(remote["train_loss"], local["train_loss"], rtol=1e-12)
        np.testing.assert_allclose(remote["suboptimality"], local["suboptimality"], rtol=1e-9)
        assert remote["suboptimality"].is_monotonic_decreasing, name


def test_importing_fco_ray_leaves_scipy_optimize_out():
    """scipy.optimize (0.3-0.6 s per process) is imported by the L-BFGS solve of E7's
    optimum only, not by every driver, Ray actor and Tune trial that imports fco_ray."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, fco_ray.api, fco_ray.backends.ray_backend, fco_ray.problems.text; "
            "print('scipy.optimize' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
