"""The algebraic facts of the update rules (the algorithms' docstrings), checked against plain per-client reference loops."""
import numpy as np
import pytest

from fco_ray.algorithms import ALGORITHMS
from fco_ray.algorithms.base import FederatedHyper
from fco_ray.backends import LocalBackend
from fco_ray.core.group import INIT_TAG
from fco_ray.core.group import make_group
from fco_ray.ops import regularizers as R
from fco_ray.ops.random import generator, sample_clients

from tests.helpers import one_client_grad, run_one, small_lasso, small_lowrank

COMPOSITE = ["fedavg", "fedavg_subgrad", "fedmid", "fedmid_osp", "feddualavg", "feddualavg_osp"]


def final_model(problem, name, rounds=5, seed=3, **hp):
    hyper = ALGORITHMS[name].Hyper(name=name, **{"client_lr": 0.01, "local_steps": 4,
                                                 "batch_size": 3, "clients_per_round": 4, **hp})
    algorithm = ALGORITHMS[name](hyper)
    result = run_one(problem, algorithm, LocalBackend(problem), rounds=rounds, eval_every=1, seed=seed)
    assert result.status == "finished"
    return algorithm.output(problem, result.state), result


@pytest.mark.parametrize("make", [small_lasso, small_lowrank])
def test_all_methods_coincide_without_regularizer(make):
    problem = make(lam=0.0)
    ref, _ = final_model(problem, "fedavg", server_lr=0.7)
    for name in COMPOSITE[1:]:
        out, _ = final_model(problem, name, server_lr=0.7)
        for k in ref:
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-12, atol=1e-12, err_msg=name)


def test_methods_differ_with_regularizer():
    problem = small_lasso(lam=0.5)
    a, _ = final_model(problem, "fedmid")
    b, _ = final_model(problem, "feddualavg")
    assert not np.allclose(a["w"], b["w"])


def reference_fedmid(problem, rounds, seed, lr, server_lr, steps, batch, per_round, client_prox):
    """FedMiD from its formulas, one client at a time."""
    psi = problem.psi
    w = problem.init_params(generator(seed, INIT_TAG))
    for r in range(rounds):
        deltas = []
        for cid in sample_clients(seed, r, problem.num_clients, per_round):
            v = dict(w)
            for k in range(steps):
                g = one_client_grad(problem, v, cid, seed, r, k, batch)
                v = {b: v[b] - lr * g[b] for b in v}
                if client_prox:
                    v = psi.prox(v, lr)
            deltas.append({b: v[b] - w[b] for b in w})
        mean = {b: np.mean([d[b] for d in deltas], axis=0) for b in w}
        w = psi.prox({b: w[b] + server_lr * mean[b] for b in w}, server_lr * lr * steps)
    return w


def reference_feddualavg(problem, rounds, seed, lr, server_lr, steps, batch, per_round):
    """FedDualAvg from its formulas, one client at a time; also checks the dual-shadow identity
    zbar_{k+1} = zbar_k - lr mean_m grad f(w^m_k) at every local step."""
    psi = problem.psi
    z = problem.init_params(generator(seed, INIT_TAG))
    etat = 0.0
    for r in range(rounds):
        ids = sample_clients(seed, r, problem.num_clients, per_round)
        zs = [dict(z) for _ in ids]
        for k in range(steps):
            grads = []
            for i, cid in enumerate(ids):
                w = psi.prox(zs[i], etat + lr * k)
                grads.append(one_client_grad(problem, w, cid, seed, r, k, batch))
            shadow = {b: np.mean([zi[b] for zi in zs], axis=0) for b in z}
            zs = [{b: zi[b] - lr * g[b] for b in z} for zi, g in zip(zs, grads)]
            new_shadow = {b: np.mean([zi[b] for zi in zs], axis=0) for b in z}
            for b in z:
                expected = shadow[b] - lr * np.mean([g[b] for g in grads], axis=0)
                np.testing.assert_allclose(new_shadow[b], expected, rtol=1e-12, atol=1e-12)
        mean = {b: np.mean([zi[b] - z[b] for zi in zs], axis=0) for b in z}
        z = {b: z[b] + server_lr * mean[b] for b in z}
        etat += server_lr * lr * steps
    return psi.prox(z, etat)


@pytest.mark.parametrize("make", [small_lasso, small_lowrank])
@pytest.mark.parametrize("name", ["fedmid", "fedmid_osp"])
def test_fedmid_matches_reference_loop(make, name):
    problem = make(lam=0.3)
    out, _ = final_model(problem, name, server_lr=0.8)
    ref = reference_fedmid(problem, 5, 3, 0.01, 0.8, 4, 3, 4, client_prox=(name == "fedmid"))
    for b in ref:
        np.testing.assert_allclose(out[b], ref[b], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [small_lasso, small_lowrank])
def test_feddualavg_matches_reference_loop_and_shadow_identity(make):
    problem = make(lam=0.3)
    out, _ = final_model(problem, "feddualavg", server_lr=1.0, clients_per_round=None)
    ref = reference_feddualavg(problem, 5, 3, 0.01, 1.0, 4, 3, problem.num_clients)
    for b in ref:
        np.testing.assert_allclose(out[b], ref[b], rtol=1e-10, atol=1e-12)


def test_fedmid_with_constraint_is_periodically_averaged_projected_sgd():
    base = small_lasso()
    problem = type(base)(train=base.train, val=base.val, shapes=base.shapes, name="l2ball",
                         psi=R.Blockwise({"w": R.L2Ball(0.5)}, base.shapes), info=base.info)
    out, _ = final_model(problem, "fedmid", server_lr=1.0)
    # the reference: projected SGD on each client, average, project once
    ref = reference_fedmid(problem, 5, 3, 0.01, 1.0, 4, 3, 4, client_prox=True)
    for b in ref:
        np.testing.assert_allclose(out[b], ref[b], rtol=1e-10, atol=1e-12)
    assert np.linalg.norm(out["w"]) <= 0.5 + 1e-12
    free, _ = final_model(base, "fedavg", server_lr=1.0)
    assert np.linalg.norm(free["w"]) > 0.6  # the constraint is active here


def one_client(problem):
    return problem.subset([2])


def test_one_client_k1_fedmid_osp_is_proximal_sgd():
    problem = one_client(small_lasso(lam=0.4))
    out, _ = final_model(problem, "fedmid_osp", rounds=20, local_steps=1, clients_per_round=1)
    w = problem.init_params(generator(3, INIT_TAG))
    for r in range(20):
        g = one_client_grad(problem, w, 0, 3, r, 0, 3)
        w = problem.psi.prox({b: w[b] - 0.01 * g[b] for b in w}, 0.01)
    for b in w:
        np.testing.assert_allclose(out[b], w[b], rtol=1e-12, atol=1e-14)


def test_one_client_k1_feddualavg_is_regularized_dual_averaging():
    """Xiao (2010) RDA with constant step: w_t = prox_{t lr psi}(w_0 - lr sum_{s<t} g_s)."""
    problem = one_client(small_lasso(lam=0.4))
    out, _ = final_model(problem, "feddualavg", rounds=20, local_steps=1, clients_per_round=1)
    w0 = problem.init_params(generator(3, INIT_TAG))
    w, gsum = w0, {b: np.zeros_like(v) for b, v in w0.items()}
    for t in range(20):
        g = one_client_grad(problem, w, 0, 3, t, 0, 3)
        gsum = {b: gsum[b] + g[b] for b in gsum}
        w = problem.psi.prox({b: w0[b] - 0.01 * gsum[b] for b in w0}, (t + 1) * 0.01)
    for b in w:
        np.testing.assert_allclose(out[b], w[b], rtol=1e-12, atol=1e-14)


def test_results_do_not_depend_on_chunking():
    problem = small_lasso()
    hyper = FederatedHyper(name="feddualavg", client_lr=0.01, clients_per_round=6, local_steps=3, batch_size=4)
    outs = []
    for chunk in (1, 4, 1024):
        alg = ALGORITHMS["feddualavg"](hyper)
        res = run_one(problem, alg, LocalBackend(problem, chunk_size=chunk), rounds=4, eval_every=2, seed=1)
        outs.append(alg.output(problem, res.state)["w"])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12)
    np.testing.assert_allclose(outs[0], outs[2], rtol=1e-12)


def test_sample_weighted_aggregation():
    """weighting: samples averages the client deltas in proportion to client sizes."""
    base = small_lasso(lam=0.0)
    from fco_ray.problems.linear import make_lasso

    problem = make_lasso(seed=0, lam=0.0, clients=3, samples_per_client=[4, 8, 20], dim=6,
                         support=2, val_clients=1, bias="zero", correlation=0.5, noise=1.0,
                         shift=1.0)
    del base
    hp = dict(client_lr=0.01, local_steps=2, batch_size=2, clients_per_round=None)
    uni = ALGORITHMS["fedavg"](FederatedHyper(name="fedavg", **hp))
    wtd = ALGORITHMS["fedavg"](FederatedHyper(name="fedavg", weighting="samples", **hp))
    from fco_ray.ops.random import Key

    ids = np.arange(3)
    backend = LocalBackend(problem)
    uniform, weighted = make_group([uni]), make_group([wtd])
    payload = uniform.broadcast(uniform.start(problem, 0))
    # each client's own message: a sum over that client alone (weight 1)
    msgs = np.stack([backend.map_clients(uniform, payload, ids[[c]], Key(0, 0, ids[[c]]))[0]["w"]
                     for c in ids])
    total_u, weight_u = backend.map_clients(uniform, payload, ids, Key(0, 0, ids))
    total_w, weight_w = backend.map_clients(weighted, payload, ids, Key(0, 0, ids))
    assert weight_u == 3 and weight_w == 4 + 8 + 20
    np.testing.assert_allclose(total_u["w"] / weight_u, msgs.mean(axis=0), rtol=1e-12)
    expected = np.average(msgs, axis=0, weights=[4, 8, 20])
    np.testing.assert_allclose(total_w["w"] / weight_w, expected, rtol=1e-12)


def test_floats_counted_per_round():
    problem = small_lasso(dim=20)
    _, result = final_model(problem, "feddualavg")
    row = result.records[-1]
    # down: z (20 + 1 bias) + etat per client; up: the delta (21) per client; 4 clients
    assert row["floats_down"] == 4 * 22
    assert row["floats_up"] == 4 * 21
