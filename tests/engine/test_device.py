"""The device path (fco_ray/backends/device): JAX programs of a round's client work, checked on JAX's
CPU platform (`backend.device: jax-cpu`) against the CPU engine, and on a GPU where one is."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="the device path needs JAX (pip install jax)")
jax.config.update("jax_enable_x64", True)

import fco_ray  # noqa: E402
from fco_ray.core.checks import device_pairs as supported_pairs  # noqa: E402
from fco_ray.core.checks import no_device_program as unsupported  # noqa: E402
from fco_ray.rules import keys  # noqa: E402
from fco_ray.ops import kernels  # noqa: E402
from fco_ray.ops.random import Key  # noqa: E402
from fco_ray.runtime.errors import ConfigError  # noqa: E402


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


GPU = _has_gpu()

PROBLEMS = {
    "bilinear_l1": {"name": "bilinear_l1", "n": 12, "m": 20, "clients": 6},
    "bilinear_nuclear": {"name": "bilinear_nuclear", "n": 12, "m": 20, "p": 5, "rank": 2, "clients": 6},
    "lasso": {"name": "lasso", "clients": 6, "samples_per_client": [9, 12, 7, 12, 10, 11], "dim": 10,
              "support": 3, "val_clients": 2},
    "adversarial": {"name": "adversarial", "clients": 6, "lam": 0.003},
    "lowrank": {"name": "lowrank", "clients": 6, "samples_per_client": [9, 12, 7, 12, 10, 11], "dim": 4,
                "rank": 2, "val_clients": 2},
    # E3 / E4 (digits, 4 clients; tests/engine/test_rules_e3_e4.py checks their rules further)
    "sparse_logreg": {"name": "sparse_logreg", "clients": 4, "lam": 0.01},
    "constrained_logreg": {"name": "constrained_logreg", "clients": 4, "radius": 1.0},
    "mlp": {"name": "mlp", "clients": 4, "hidden": [4], "radius": 2.0},
}
#: problems whose psi has no weight lam (a constraint alone)
NO_LAM = {"constrained_logreg", "mlp"}


def config(algorithm: str, problem: str, device: str, **hp) -> dict:
    saddle = problem.startswith("bilinear") or problem == "adversarial"
    alg = {"name": algorithm, "client_lr": 0.3 if saddle else 0.02, "server_lr": 1.0,
           "local_steps": 3, "clients_per_round": 4,
           **({} if problem.startswith("bilinear") else {"batch_size": 4}), **hp}
    return {"problem": PROBLEMS[problem], "algorithm": alg, "rounds": 3, "eval_every": 1,
            "seed": 3, "backend": {"name": "local", "device": device}}


def assert_same_history(device, reference, rtol=1e-9):
    assert list(device.columns) == list(reference.columns)
    assert len(device) == len(reference) and len(reference) > 0
    for col in reference.columns:
        a, b = reference[col].to_numpy(), device[col].to_numpy()
        if a.dtype.kind in "fi":
            np.testing.assert_allclose(b, a, rtol=rtol, atol=0, err_msg=col)
        else:
            assert list(a) == list(b), col


# ---- keyed draws -------------------------------------------------------------------------
def test_keyed_draws_equal_the_cpu_generator():
    ids = np.array([0, 3, 17, 2**40 + 5, 2**63 + 11], np.uint64)
    seed, rnd, step, stream = 2**62 + 7, 123, 9, 2
    key = Key(seed, rnd, ids, step, stream)
    # compiled, as the rounds call them (op by op, each operation compiles a program per shape)
    bits, uniform, normal = (jax.jit(f, static_argnums=5) for f in (keys.bits, keys.uniform, keys.normal))
    integers = jax.jit(keys.integers, static_argnums=6)
    got = np.asarray(bits(seed, rnd, step, stream, ids, 64))
    np.testing.assert_array_equal(got, kernels.keyed_bits(seed, rnd, step, stream, ids, 64))
    np.testing.assert_array_equal(np.asarray(uniform(seed, rnd, step, stream, ids, 64)),
                                  key.uniform((64,)))
    highs = np.array([1, 2, 7, 1000, 2**40])
    np.testing.assert_array_equal(np.asarray(integers(seed, rnd, step, stream, ids, highs, 64)),
                                  key.integers(highs, 64))
    # normals: JAX's ndtri is not SciPy's to the last bit (measured <= ~1.02e-15 relative)
    normal = np.asarray(normal(seed, rnd, step, stream, ids, 4000))
    np.testing.assert_allclose(normal, key.normal((4000,)), rtol=2e-15, atol=1e-15)


def test_keyed_draws_inside_a_jitted_loop_with_a_traced_step():
    ids = np.arange(4, dtype=np.uint64)

    @jax.jit
    def draws(seed, rnd):
        return jax.lax.map(lambda k: keys.uniform(seed, rnd, k, 1, ids, 3), jax.numpy.arange(5))

    got = np.asarray(draws(np.uint64(5), np.uint64(6)))
    for k in range(5):
        np.testing.assert_array_equal(got[k], Key(5, 6, ids, k, 1).uniform((3,)))


# ---- whole runs: device (JAX on CPU) equals the CPU engine -----------------------------
# fused, in the fast subset: every rule and every problem of the E1, E2, E5 and E6 protocols
# once; their other pairs (the same programs with other flags or data) in the slow selection
CORE = {("fedmip", "bilinear_l1"), ("feddualex", "bilinear_nuclear"), ("fedmid", "lasso"),
        ("feddualavg", "lowrank"), ("feddualex", "adversarial")}
#: ... and one alone (a group of one: the fused ones above cover the same rules)
CORE_ALONE = {("feddualavg", "lasso")}


@pytest.mark.parametrize("algorithm,problem", [
    pytest.param(a, p, marks=() if (a, p) in CORE_ALONE else pytest.mark.slow) for a, p in supported_pairs()])
def test_run_on_the_device_equals_the_cpu_engine(algorithm, problem):
    reference = fco_ray.run(config(algorithm, problem, "cpu"))
    device = fco_ray.run(config(algorithm, problem, "jax-cpu"))
    assert_same_history(device, reference)


@pytest.mark.parametrize("algorithm,problem", [
    pytest.param(a, p, marks=() if (a, p) in CORE else pytest.mark.slow) for a, p in supported_pairs()])
def test_fused_group_on_the_device_equals_the_cpu_engine(algorithm, problem):
    saddle = problem.startswith("bilinear") or problem == "adversarial"
    grid = {"algorithm.client_lr": [0.3, 0.1, 0.03] if saddle else [0.05, 0.02, 0.005],
            "algorithm.server_lr": [1.0, 0.5]}
    if algorithm == "local":  # local's server_lr is fixed at 1
        del grid["algorithm.server_lr"]
    elif problem not in NO_LAM:
        grid["problem.lam"] = [0.1, 0.05]
    reference = fco_ray.run_grid(config(algorithm, problem, "cpu"), grid)
    device = fco_ray.run_grid(config(algorithm, problem, "jax-cpu"), grid)
    assert_same_history(device, reference)


def test_a_diverging_member_leaves_the_group_as_on_the_cpu():
    grid = {"algorithm.client_lr": [1e6, 0.02]}
    cfg = config("feddualavg", "lasso", "cpu")
    reference = fco_ray.run_grid(cfg, grid)
    device = fco_ray.run_grid(config("feddualavg", "lasso", "jax-cpu"), grid)
    assert set(reference["status"]) == {"diverged", "finished"}
    assert_same_history(device, reference)


@pytest.mark.skipif(not GPU, reason="no GPU visible to JAX: the cuda device path is checked on GPU machines only")
@pytest.mark.parametrize("algorithm,problem", [("feddualex", "bilinear_l1"), ("feddualex", "bilinear_nuclear"),
                                               ("feddualavg", "lasso"), ("fedmip", "bilinear_nuclear")])
def test_cuda_equals_the_cpu_engine(algorithm, problem):
    reference = fco_ray.run(config(algorithm, problem, "cpu"))
    assert_same_history(fco_ray.run(config(algorithm, problem, "cuda")), reference)
    grid = {"algorithm.client_lr": [0.3, 0.1] if problem != "lasso" else [0.02, 0.005]}
    assert_same_history(fco_ray.run_grid(config(algorithm, problem, "cuda"), grid),
                        fco_ray.run_grid(config(algorithm, problem, "cpu"), grid))


# ---- errors: one line, exit code 2 ------------------------------------------------------
def test_unsupported_pair_is_a_config_error_listing_the_pairs():
    with pytest.raises(ConfigError, match="no device program for algorithm 'fedavg' on problem 'sparse_text_logreg'.*bilinear_l1: .*feddualex"):
        fco_ray.run({"problem": {"name": "sparse_text_logreg"}, "algorithm": {"name": "fedavg"},
                     "backend": {"name": "local", "device": "jax-cpu"}})
    assert unsupported("feddualex", "bilinear_l1") is None
    assert unsupported("feddualavg", "adversarial") is None  # any pair whose classes have rules


def test_full_local_batches_on_the_device_equal_the_cpu_engine():
    """batch_size null: every row of a client, weighted by its (unequal) size."""
    for algorithm, problem in [("feddualavg", "lasso"), ("feddualex", "adversarial")]:
        cfg = config(algorithm, problem, "cpu", batch_size=None)
        reference = fco_ray.run(cfg)
        assert_same_history(fco_ray.run({**cfg, "backend": {"name": "local", "device": "jax-cpu"}}), reference)


def test_unknown_device_is_a_config_error():
    with pytest.raises(ConfigError, match="backend.device"):
        fco_ray.run(config("feddualavg", "lasso", "tpu"))


@pytest.mark.slow  # a fresh process that imports JAX and asks it for a GPU
@pytest.mark.skipif(GPU, reason="checks the error where no GPU is present")
def test_cuda_without_a_gpu_exits_2(tmp_path):
    import yaml

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config("feddualavg", "lasso", "cuda")))
    out = subprocess.run([sys.executable, "-m", "fco_ray", "run", str(path)], capture_output=True,
                         text=True, env={**os.environ, "JAX_PLATFORMS": ""}, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "backend.device: 'cuda' asked for, but JAX finds no GPU" in out.stderr
    assert "Traceback" not in out.stderr
    from mlflow import MlflowClient  # the run could not start: no MLflow run was left behind

    assert not MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_runs(["0"])


def test_cuda_without_jax_is_a_config_error():
    code = textwrap.dedent("""
        import sys
        sys.modules["jax"] = None  # JAX not installed
        import fco_ray
        from fco_ray.runtime.errors import ConfigError
        try:
            fco_ray.run({"problem": {"name": "lasso", "clients": 4, "samples_per_client": 5, "dim": 3,
                                     "support": 1, "val_clients": 1},
                         "algorithm": {"name": "feddualavg", "clients_per_round": 2, "batch_size": 2},
                         "rounds": 1, "backend": {"name": "local", "device": "cuda"}})
        except ConfigError as e:
            print("ConfigError:", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "ConfigError: backend.device needs JAX" in out.stdout, out.stderr
    assert "pip install -e '.[gpu]'" in out.stdout


def test_a_group_larger_than_the_device_memory_is_refused(monkeypatch):
    from fco_ray.backends.device import memory

    monkeypatch.setattr(memory, "free_bytes", lambda dev: 1 << 20)  # a 1 MiB device
    cfg = config("feddualex", "bilinear_l1", "jax-cpu")
    cfg["problem"] = {**cfg["problem"], "n": 300, "m": 600}
    with pytest.raises(ConfigError, match="needs about .* of device memory, more than the 1.0 MiB free"):
        fco_ray.run_grid(cfg, {"algorithm.client_lr": [0.1, 0.01, 0.001]})


def test_memory_estimate_grows_with_the_group():
    from fco_ray.backends.device.backend import estimate_bytes

    small = sum(estimate_bytes(1000, 90, 990, 1, 10).values())
    large = sum(estimate_bytes(1000, 90, 990, 350, 10).values())
    # per member: 10 clients x (6 live iterates of 90 floats + a message of 990) x 8 bytes
    assert large - small == 349 * 10 * (6 * 90 + 990) * 8


# ---- the engine without Ray and MLflow (the GPU machines have neither) -------------------
def test_run_and_run_grid_without_ray_and_mlflow():
    code = textwrap.dedent("""
        import sys
        for name in ("ray", "mlflow"):
            sys.modules[name] = None  # any import of them fails
        import fco_ray
        cfg = {"problem": {"name": "lasso", "clients": 4, "samples_per_client": 6, "dim": 5,
                           "support": 2, "val_clients": 1},
               "algorithm": {"name": "feddualavg", "clients_per_round": 2, "batch_size": 3},
               "rounds": 2, "eval_every": 1}
        df = fco_ray.run(cfg)
        grid = fco_ray.run_grid(cfg, {"algorithm.client_lr": [0.01, 0.001]})
        print("rows", len(df), len(grid))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "rows 3 6" in out.stdout


# ---- the GPU scripts, on JAX's CPU platform (so they cannot fail on a GPU for a trivial reason)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_gpu_benchmark_quick_mode_runs(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu.py"), "--out", str(tmp_path),
                          "--quick", "--device", "jax-cpu", "--no-cpu"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    import json

    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["equality"] and all(r["pass_1e-9"] for r in result["equality"])
    assert [r for r in result["timings"] if "error" in r] == []
    assert "| bilinear_l1 | feddualex | jax-cpu | 3 |" in (tmp_path / "gpu.md").read_text()


@pytest.mark.slow
def test_e5_protocol_quick_mode_appends_and_resumes(tmp_path):
    cmd = [sys.executable, os.path.join(ROOT, "results", "e5_protocol.py"), "--problem", "l1",
           "--out", str(tmp_path), "--quick", "--device", "jax-cpu", "--seeds", "0", "--ks", "10",
           "--methods", "feddualex,fedmid"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    import pandas as pd

    trials = pd.read_csv(tmp_path / "l1_trials.csv")
    assert len(trials) == 2 * 35 and set(trials["method"]) == {"feddualex", "fedmid"}
    assert trials["gap"].notna().all() and trials.loc[trials["method"] == "feddualex", "gap_ergodic"].notna().all()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert "0 groups run" in again.stdout
    assert len(pd.read_csv(tmp_path / "l1_trials.csv")) == 70
    assert "| 10 | feddualex | 1 |" in (tmp_path / "l1_summary.md").read_text()


def test_a_sweep_on_the_device_reserves_a_gpu_share_per_trial(tmp_path):
    """tune.gpus_per_trial: trials with backend.device cuda must ask for a GPU share (a
    fraction lets fused groups share one GPU); it goes into the trial's first bundle, and a
    cluster without enough GPUs is refused (Tune would wait for it without end)."""
    import yaml

    from fco_ray.core.checks import check_gpus_fit
    from fco_ray.core.config import parse_run
    from fco_ray.runtime.errors import ConfigError
    from fco_ray.sweep.checks import load_sweep
    from fco_ray.sweep.trainable import trial_bundles

    sweep = {"name": "gpu", "problem": {"name": "lasso", "clients": 8, "dim": 16, "support": 4,
                                        "samples_per_client": 16, "val_clients": 2},
             "algorithms": ["feddualavg"], "algorithm": {"clients_per_round": 4},
             "backend": {"name": "local", "device": "cuda"}, "report": False,
             "search": {"grid": {"algorithm.client_lr": [0.01, 0.001]}}}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(sweep))
    with pytest.raises(ConfigError, match="tune.gpus_per_trial: trials with backend.device cuda"):
        load_sweep(path)
    assert load_sweep(path, ["tune.gpus_per_trial=0.25"]).spec.tune.gpus_per_trial == 0.25
    backend = parse_run({"problem": {"name": "lasso"}, "algorithm": {"name": "feddualavg"},
                         "backend": {"name": "local", "device": "cuda"}}).backend
    assert trial_bundles(backend, 1.0, 0.25) == [{"CPU": 1.0, "GPU": 0.25}]
    assert trial_bundles(backend, 1.0) == [{"CPU": 1.0}]
    check_gpus_fit(0.25, [1.0], "c")
    check_gpus_fit(0.0, [], "c")
    with pytest.raises(ConfigError, match="tune.gpus_per_trial: a trial needs 0.25 GPU, but c has 0 GPUs"):
        check_gpus_fit(0.25, [0.0, 0.0], "c")
