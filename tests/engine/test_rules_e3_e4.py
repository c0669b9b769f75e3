"""The E3/E4 problem rules (fco_ray/rules/problems.py: `BinaryLogistic`, `Multinomial`, `MLP`;
fco_ray/rules/psi.py: `Ball`, the l1- and l2-ball projections) against the NumPy problems:
the stochastic gradient of every client with the engine's keyed minibatch rows, and of the
full batch (1e-12), the prox / projection / subgradient of psi (1e-12), and short runs of
FedMiD and FedDualAvg on `device: jax-cpu` against `device: cpu` (rows at 1e-9)."""
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the problem rules need JAX (pip install jax)")

import jax.numpy as jnp  # noqa: E402

import fco_ray  # noqa: E402
from fco_ray.core.checks import device_pairs  # noqa: E402
from fco_ray.ops import prox as P  # noqa: E402
from fco_ray.ops import regularizers as R  # noqa: E402
from fco_ray.ops.random import BATCH, Key  # noqa: E402
from fco_ray.problems import PROBLEMS  # noqa: E402
from fco_ray.problems.logistic import BinaryLogistic, clients_from_pairs  # noqa: E402
from fco_ray.problems.registry import build_problem  # noqa: E402
from fco_ray.rules import problems as rules  # noqa: E402
from fco_ray.rules import psi as jpsi  # noqa: E402

from tests.helpers import daily  # noqa: E402

#: small instances (digits: 64 features, 4 clients of unequal sizes)
CONFIGS = {
    "sparse_logreg": {"name": "sparse_logreg", "clients": 4, "lam": 0.01},
    "constrained_logreg": {"name": "constrained_logreg", "clients": 4, "radius": 1.0},
    "constrained_logreg_l2": {"name": "constrained_logreg", "clients": 4, "constraint": "l2_ball",
                              "radius": 0.5},
    "mlp": {"name": "mlp", "clients": 4, "hidden": [6, 5], "radius": 2.0},
}
RULES = {"sparse_logreg": rules.BinaryLogistic, "constrained_logreg": rules.Multinomial,
         "constrained_logreg_l2": rules.Multinomial, "mlp": rules.MLP}

_BUILT: dict = {}


def problem(name: str):
    if name not in _BUILT:
        cfg = CONFIGS[name]
        _BUILT[name] = build_problem(PROBLEMS[cfg["name"]].params.model_validate(cfg), 0)
    return _BUILT[name]


def haxby_like():
    """A BinaryLogistic on float32 features (as `fco_ray.data.haxby` stores its scans), three
    clients of 7, 12 and 9 samples, labels in {0, 1}."""
    rng = np.random.default_rng(5)
    pairs = [(rng.normal(size=(n, 11)).astype(np.float32), rng.integers(0, 2, n)) for n in (7, 12, 9)]
    train = clients_from_pairs(pairs)
    shapes = {"w": (11,), "b": ()}
    return BinaryLogistic(train=train, val=None, shapes=shapes, name="sparse_logreg",
                          psi=R.Blockwise({"w": R.L1(0.02)}, shapes))


def random_params(p, scale: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {k: scale * rng.normal(size=s) for k, s in p.shapes.items()}


def assert_close_blocks(got: dict, ref: dict, rtol: float, zero_ok: bool = False):
    """Blockwise: max |got - ref| <= rtol max |ref| (relative to the block's scale); a zero
    block (a prox that thresholds everything) only where `zero_ok`, and then exactly."""
    assert set(got) == set(ref)
    for k in ref:
        a, b = np.asarray(got[k]), np.asarray(ref[k])
        assert a.shape == b.shape, k
        scale = np.max(np.abs(b)) if b.size else 0.0
        if zero_ok and scale == 0:
            np.testing.assert_array_equal(a, 0.0, err_msg=k)
            continue
        assert scale > 0, f"block {k} is zero: the comparison would say nothing"
        assert np.max(np.abs(a - b)) <= rtol * scale, (k, np.max(np.abs(a - b)) / scale)


_PROGRAMS: dict = {}


def _compiled(rule):
    """One compiled program per rule: every client at once (vmap), the seed, round and local
    step traced (as inside the compiled rounds)."""
    if id(rule) not in _PROGRAMS:
        @jax.jit
        def grads(data, params, ids, sizes, offsets, seed, rnd, k):
            def one(cid, size, offset):
                return rule.grad(data, params, rules.Client(seed, rnd, cid, size, offset), k, BATCH)
            return jax.vmap(one)(ids, sizes, offsets)
        _PROGRAMS[id(rule)] = (rule, grads)  # the rule is kept: its id stays its own
    return _PROGRAMS[id(rule)][1]


def rule_gradients(p, rule, params: dict, seed: int, rnd: int, k: int) -> list[dict]:
    """The rule's gradient of every client of `p`, compiled (one program over the clients)."""
    # NumPy in, NumPy out: op-by-op JAX calls outside the program (jnp.asarray, slicing a
    # device array) would each compile a program of their own per shape
    sizes = np.asarray(p.train.sizes, dtype=np.int64)
    offsets = np.arange(p.num_clients, dtype=np.int64) * p.train.max_samples
    out = _compiled(rule)(rule.arrays(), dict(params), np.arange(p.num_clients, dtype=np.uint64),
                          sizes, offsets, np.uint64(seed), np.uint64(rnd), np.int64(k))
    out = {b: np.asarray(v) for b, v in out.items()}
    return [{b: v[c] for b, v in out.items()} for c in range(p.num_clients)]


def numpy_gradients(p, params: dict, seed: int, rnd: int, k: int, batch) -> list[dict]:
    """`Problem.grad` of every client at once (the engine's stacked call, keyed rows)."""
    rows = np.arange(p.num_clients)
    stacked = {b: np.broadcast_to(v, (len(rows),) + np.shape(v)) for b, v in params.items()}
    key = Key(seed, rnd, rows, step=k, stream=BATCH)
    g = p.grad(stacked, rows, key, batch)
    return [{b: v[c] for b, v in g.items()} for c in range(len(rows))]


# ---- gradients ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CONFIGS))
def test_rule_gradient_equals_the_numpy_gradient(name):
    p = problem(name)
    assert len(set(p.train.sizes.tolist())) > 1  # unequal clients: the full-batch weights matter
    rule = p.make_rule(None)
    assert type(rule) is RULES[name]
    made = {batch: p.make_rule(batch) for batch in (None, 5, 17)}
    for scale, seed in [(0.3, 1), (0.05, 2)]:
        params = random_params(p, scale, seed)
        for batch, rule in made.items():
            for k in (0, 2):
                got = rule_gradients(p, rule, params, seed=11, rnd=4 + seed, k=k)
                ref = numpy_gradients(p, params, seed=11, rnd=4 + seed, k=k, batch=batch)
                for c in range(p.num_clients):
                    assert_close_blocks(got[c], ref[c], 1e-12)


def test_rule_minibatches_differ_between_clients_and_steps():
    """The keyed rows move with the client and the step (the comparison above is not of one
    fixed batch)."""
    p = problem("sparse_logreg")
    rule, params = p.make_rule(5), random_params(p, 0.3, 1)
    a = rule_gradients(p, rule, params, seed=11, rnd=5, k=0)
    b = rule_gradients(p, rule, params, seed=11, rnd=5, k=1)
    assert not np.allclose(a[0]["w"], b[0]["w"]) and not np.allclose(a[0]["w"], a[1]["w"])


def test_float32_features_as_haxby_stores_them():
    p = haxby_like()
    assert p.train.arrays["x"].dtype == np.float32
    params = random_params(p, 0.4, 3)
    for batch in (None, 4):
        rule = p.make_rule(batch)
        assert isinstance(rule, rules.BinaryLogistic)
        got = rule_gradients(p, rule, params, seed=2, rnd=1, k=1)
        ref = numpy_gradients(p, params, seed=2, rnd=1, k=1, batch=batch)
        for c in range(p.num_clients):
            assert_close_blocks(got[c], ref[c], 1e-12)
            assert got[c]["w"].dtype == np.float64


def test_intercept_is_never_regularized():
    for name in CONFIGS:
        p = problem(name)
        rule = p.make_rule(4)
        params = random_params(p, 50.0, 4)  # far outside every ball, far above every threshold
        x = {k: jnp.asarray(v) for k, v in params.items()}
        # compiled, as the rounds call them (run op by op, each op compiles a program of its own)
        out, sub = jax.jit(lambda x: (rule.prox(x, 10.0, 1.0), rule.subgradient(x, 1.0)))(x)
        for block in p.shapes:
            if block.startswith("b"):
                np.testing.assert_array_equal(np.asarray(out[block]), params[block])
                np.testing.assert_array_equal(np.asarray(sub[block]), 0.0)


# ---- psi ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CONFIGS))
def test_rule_prox_equals_the_numpy_prox(name):
    p = problem(name)
    rule = p.make_rule(4)
    lam = rule.lam
    assert lam == (0.01 if name == "sparse_logreg" else 0.0)
    prox = jax.jit(lambda x, t: rule.prox(x, t, lam))
    project = jax.jit(rule.project)
    subgradient = jax.jit(lambda x: rule.subgradient(x, lam))
    for scale in (0.001, 0.3, 40.0):  # inside the balls, on the way out, far outside
        x = random_params(p, scale, 7)
        jx = {k: jnp.asarray(v) for k, v in x.items()}
        for t in (0.0, 0.5, 3.0):
            assert_close_blocks(prox(jx, t), p.psi.prox(x, t), 1e-12, zero_ok=True)
        assert_close_blocks(project(jx), p.psi.project(x), 1e-12)
        got, ref = subgradient(jx), p.psi.subgradient(x)
        for k in ref:
            np.testing.assert_allclose(np.asarray(got[k]), ref[k], rtol=1e-12, atol=0, err_msg=k)
    if name != "sparse_logreg":  # the balls bind at 40 (the projection is not the identity)
        far = random_params(p, 40.0, 7)
        out = project({k: jnp.asarray(v) for k, v in far.items()})
        norm = (lambda w: np.abs(w).sum()) if "l2" not in name else (lambda w: np.sqrt((w * w).sum()))
        for block, reg in p.psi.regs.items():
            assert norm(far[block]) > reg.radius
            assert norm(np.asarray(out[block])) == pytest.approx(reg.radius, rel=1e-12)


def _cases(rng):
    """Blocks for the projections: vectors, matrices, ties in |x|, zeros, a 1-entry block."""
    yield rng.normal(size=17)
    yield rng.normal(size=(9, 4))
    yield np.array([3.0, -3.0, 3.0, 1.0, -1.0, 0.0, 0.0, 2.5])
    yield np.repeat(rng.normal(size=5), 4)
    yield np.array([-7.5])
    yield rng.standard_cauchy(size=200)


@pytest.mark.parametrize("radius", daily([(1.0,), (1e-3,), (0.5,), (4.0,), (1e3,)],  # fast subset: radius 1
                                         key=lambda case: "radius"))
def test_ball_projections_equal_the_numpy_projections(radius):
    l1 = jax.jit(lambda x: jpsi.project_l1_ball(x, radius))
    l2 = jax.jit(lambda x: jpsi.project_l2_ball(x, radius))
    rng = np.random.default_rng(int(radius * 1000) % 97)
    for x in _cases(rng):
        want1 = P.project_l1_ball(x, radius, x.ndim)
        want2 = P.project_l2_ball(x, radius, x.ndim)
        np.testing.assert_allclose(np.asarray(l1(jnp.asarray(x))), want1, rtol=1e-12,
                                   atol=1e-12 * max(radius, np.max(np.abs(want1))))
        np.testing.assert_allclose(np.asarray(l2(jnp.asarray(x))), want2, rtol=1e-12, atol=0)
        # the projection lands on the ball from outside and leaves an inside point alone
        got1 = np.asarray(l1(jnp.asarray(x)))
        if np.abs(x).sum() > radius:
            assert np.abs(got1).sum() == pytest.approx(radius, rel=1e-12)
        else:
            np.testing.assert_array_equal(got1, x)
    block = jpsi.Ball("l1", radius)
    x = rng.normal(size=(5, 3)) * 10
    np.testing.assert_allclose(np.asarray(block.prox(jnp.asarray(x), 0.7)),
                               R.L1Ball(radius).prox(x, 0.7, 2), rtol=1e-12, atol=1e-12 * radius)
    np.testing.assert_array_equal(np.asarray(block.subgradient(jnp.asarray(x), 0.7)), 0.0)


def test_ball_rejects_an_unknown_norm():
    with pytest.raises(ValueError, match="norm must be one of"):
        jpsi.Ball("linf", 1.0)


def test_a_penalty_and_a_ball_together_have_no_rule():
    """`classifier_blocks` answers None for what it does not know (the engine then says so)."""
    shapes = {"w": (4,), "b": ()}
    assert rules.classifier_blocks(R.Blockwise({"w": R.L1Ball(1.0)}, shapes))["w"].norm == "l1"
    assert rules.classifier_blocks(R.Blockwise({"w": R.L2Ball(1.0)}, shapes))["w"].norm == "l2"
    assert rules.classifier_blocks(R.Blockwise({"w": R.L1(0.1), "b": R.L2Ball(1.0)}, shapes)) is not None
    assert rules.classifier_blocks(R.Blockwise({"w": R.L1(0.1), "b": R.L1(0.2)}, shapes)) is None  # two lams


def test_the_pairs_run_on_a_device():
    pairs = set(device_pairs())
    for prob in ("sparse_logreg", "constrained_logreg", "mlp"):
        for alg in ("fedavg", "fedavg_subgrad", "fedmid", "fedmid_osp", "feddualavg", "feddualavg_osp", "local"):
            assert (alg, prob) in pairs


# ---- whole runs: jax-cpu equals the CPU engine ------------------------------------------
def run_config(algorithm: str, name: str, device: str, **hp) -> dict:
    alg = {"name": algorithm, "client_lr": 0.05, "server_lr": 1.0, "local_steps": 3,
           "clients_per_round": 3, "batch_size": 4, **hp}
    return {"problem": CONFIGS[name], "algorithm": alg, "rounds": 3, "eval_every": 1, "seed": 3,
            "backend": {"name": "local", "device": device}}


def assert_same_history(device, reference, rtol=1e-9):
    assert list(device.columns) == list(reference.columns)
    assert len(device) == len(reference) == 4
    for col in reference.columns:
        a, b = reference[col].to_numpy(), device[col].to_numpy()
        if a.dtype.kind in "fi":
            np.testing.assert_allclose(b, a, rtol=rtol, atol=0, err_msg=col)
        else:
            assert list(a) == list(b), col


@pytest.mark.parametrize("name,algorithm,hp", daily([  # fast subset: one algorithm per problem
    ("sparse_logreg", "fedmid", {}),
    ("sparse_logreg", "feddualavg", {}),
    ("constrained_logreg", "fedmid", {}),
    ("constrained_logreg", "feddualavg", {}),
    ("constrained_logreg_l2", "fedmid", {"batch_size": None}),
    ("mlp", "fedmid", {}),
    ("mlp", "feddualavg", {}),
], key=lambda case: case[0]))
def test_run_on_jax_cpu_equals_the_cpu_engine(name, algorithm, hp):
    reference = fco_ray.run(run_config(algorithm, name, "cpu", **hp))
    device = fco_ray.run(run_config(algorithm, name, "jax-cpu", **hp))
    assert {"train_loss", "train_accuracy", "density"} <= set(reference.columns)
    assert_same_history(device, reference)
    loss = reference["train_loss"].to_numpy()
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]  # it trains
    if name == "constrained_logreg":  # the l1 ball binds: the projection zeroes weights
        assert reference["density"].to_numpy()[1:].max() < 1.0


def numpy_fedmid(p, seed: int, rounds: int, lr: float, server_lr: float, steps: int, per_round: int,
                 batch) -> list[float]:
    """FedMiD written out on the NumPy problem (`Problem.grad` with the engine's keyed rows,
    `psi.prox`): the objective after each round, round 0 first. Independent of the engine's
    round loop and of every rule, so the runs above are anchored to the NumPy problem too."""
    from fco_ray.core.group import INIT_TAG
    from fco_ray.ops.random import generator, sample_clients

    w = p.init_params(generator(seed, INIT_TAG))
    losses = [p.objective(w)]
    for rnd in range(rounds):
        ids = sample_clients(seed, rnd, p.num_clients, per_round)
        x = {b: np.broadcast_to(v, (len(ids),) + np.shape(v)).copy() for b, v in w.items()}
        for k in range(steps):
            g = p.grad(x, ids, Key(seed, rnd, ids, step=k, stream=BATCH), batch)
            x = p.psi.prox({b: x[b] - lr * g[b] for b in x}, lr)
        mean = {b: (x[b] - w[b]).sum(axis=0) / len(ids) for b in w}
        w = p.psi.prox({b: w[b] + server_lr * mean[b] for b in w}, server_lr * lr * steps)
        losses.append(p.objective(w))
    return losses


@pytest.mark.parametrize("name", ["sparse_logreg", "constrained_logreg", "mlp"])
def test_fedmid_on_jax_cpu_equals_fedmid_written_out_in_numpy(name):
    cfg = run_config("fedmid", name, "jax-cpu")
    device = fco_ray.run(cfg)
    p = build_problem(PROBLEMS[CONFIGS[name]["name"]].params.model_validate(CONFIGS[name]), cfg["seed"])
    alg = cfg["algorithm"]
    want = numpy_fedmid(p, cfg["seed"], cfg["rounds"], alg["client_lr"], alg["server_lr"],
                        alg["local_steps"], alg["clients_per_round"], alg["batch_size"])
    np.testing.assert_allclose(device["train_loss"].to_numpy(), want, rtol=1e-9, atol=0)
