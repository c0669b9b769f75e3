"""`backend.device: auto` (the default): the CPU engine measured faster for the work
(fco_ray/backends/choice.py), from the table the benchmark writes (fco_ray/backends/speeds.json)."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import fco_ray
from fco_ray.backends import choice
from fco_ray.core.config import parse_run
from fco_ray.core.plan import prepare, round_work

ROOT = Path(__file__).resolve().parents[2]
CASE = {"case": "test", "problem": "lasso", "algorithm": "feddualavg", "G": 4, "every": 5,
        "work": 10_000, "numpy_ms": 10.0, "compiled_ms": 2.0, "compile_s": 0.5}
# the start and compilation, paid back PAYBACK times: 2 x (1.5 + 0.5) = 4 s; 8 ms saved per
# configuration-round at full work
PAYS_AFTER = 4.0 / 0.008


def test_the_table_is_the_benchmark_record_read_by_the_benchmark():
    """speeds.json is what `compiled_rounds.py --speeds` derives from the committed record (no
    hand-edited speeds)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import compiled_rounds
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    record = json.loads((ROOT / "benchmarks/results/compiled_rounds.json").read_text())
    assert choice.load_speeds() == compiled_rounds.speeds(record["rows"])
    assert {c["problem"] for c in choice.load_speeds()} >= {"lasso", "bilinear_l1", "adversarial"}


@pytest.mark.parametrize("group, rounds, work, every, expected", [
    (4, int(PAYS_AFTER / 4) + 1, 10_000, 5, True),  # long enough
    (4, int(PAYS_AFTER / 4) - 1, 10_000, 5, False),  # one round short
    (1, int(PAYS_AFTER), 10_000, 5, True),  # nearest case G = 4: its speeds, this group's size
    (4, int(PAYS_AFTER / 4) + 1, 5_000, 5, False),  # half the work saves half the time
    (4, int(PAYS_AFTER / 4) + 1, 50_000, 5, True),  # more work: no extrapolation past the case
    (4, int(PAYS_AFTER / 4) + 1, 10_000, 4, False),  # shorter compiled calls than measured
])
def test_compiled_rounds_only_where_they_pay(group, rounds, work, every, expected):
    assert choice.compiled_pays(choice.nearest_case([CASE], "lasso", "feddualavg", group),
                                group, rounds, work, every) is expected


def test_shorter_calls_than_measured_are_fine_where_rounds_are_expensive():
    heavy = {**CASE, "numpy_ms": 2000.0, "compiled_ms": 1400.0, "every": 2, "work": 10}
    assert choice.compiled_pays(heavy, 1, 20, 10, 1)  # E5 nuclear: 20 rounds, evaluated every round
    assert not choice.compiled_pays({**CASE, "every": 2}, 4, 10**6, 10_000, 1)  # cheap rounds


def test_slower_or_unmeasured_pairs_no_rules_and_no_jax_stay_on_numpy(monkeypatch):
    slow = {**CASE, "compiled_ms": 9.5}  # within MARGIN: not worth a compiler
    assert not choice.compiled_pays(slow, 4, 10**6, 10_000, 5)
    long = {"group": 4, "rounds": 10**6, "eval_every": 10, "work": 10**9, "speeds": [CASE]}
    monkeypatch.setattr(choice, "jax_loads", lambda: True)
    assert choice.chosen_device("lasso", "feddualavg", **long) == "jax-cpu"
    assert choice.chosen_device("lasso", "feddualavg", rules=False, **long) == "cpu"
    assert choice.chosen_device("lasso", "fedmid", **long) == "cpu"  # a pair not measured
    assert choice.chosen_device("logistic", "feddualavg", **long) == "cpu"
    monkeypatch.setattr(choice, "jax_loads", lambda: False)  # not installed, or broken
    assert choice.chosen_device("lasso", "feddualavg", **long) == "cpu"


def test_auto_is_the_default_groups_as_the_numpy_engine_and_refuses_rule_only_algorithms():
    cfg = parse_run({"problem": {"name": "lasso"}, "algorithm": {"name": "feddualavg"}})
    assert cfg.backend.device == "auto" and not cfg.backend.compiles_rounds
    # the shipped table on the problems the tests build: short runs stay on NumPy
    small = prepare([cfg])
    assert small.backend.device == "cpu"
    assert round_work(cfg, small.problem) == 1025 * 10 * 10  # E1: 1,025 floats, 10 clients, 10 steps


jax = importlib.util.find_spec("jax")


@pytest.mark.skipif(jax is None, reason="the compiled engine needs JAX (pip install jax)")
def test_auto_runs_compiled_rounds_where_they_pay_with_the_numpy_engines_numbers(monkeypatch):
    cfg = {"problem": {"name": "bilinear_l1", "n": 12, "m": 20, "clients": 6},
           "algorithm": {"name": "feddualex", "client_lr": 0.3, "local_steps": 3, "clients_per_round": 4},
           "rounds": 6, "eval_every": 2, "seed": 3}
    fast = {**CASE, "problem": "bilinear_l1", "algorithm": "feddualex", "G": 1, "every": 2,
            "work": 1, "compile_s": 0.0}
    monkeypatch.setattr(choice, "load_speeds", lambda: [fast])
    monkeypatch.setattr(choice, "JAX_START_S", 0.0)
    assert prepare([parse_run(cfg)]).backend.device == "jax-cpu"
    auto = fco_ray.run(cfg)
    reference = fco_ray.run({**cfg, "backend": {"name": "local", "device": "cpu"}})
    assert auto.attrs["config"]["backend"]["device"] == "auto"
    assert auto.attrs["backend"]["device"] == "jax-cpu"  # the settings it ran with
    assert reference.attrs["backend"]["device"] == "cpu"
    assert list(auto.columns) == list(reference.columns) and len(auto) == len(reference) == 4
    for col in reference.columns:
        np.testing.assert_allclose(auto[col].to_numpy(float), reference[col].to_numpy(float),
                                   rtol=1e-9, atol=0, err_msg=col)


@pytest.mark.skipif(jax is None, reason="the compiled engine needs JAX (pip install jax)")
def test_a_process_held_to_one_thread_gives_xla_one_thread():
    """Ray sets OMP_NUM_THREADS=1 in a trial of one CPU: XLA's CPU pool follows (set before
    JAX loads), so compiled trials side by side do not oversubscribe the cores."""
    import os
    import subprocess

    code = ("import os; from fco_ray.backends.device.backend import _jax, ONE_THREAD; _jax(); "
            "print(os.environ.get('XLA_FLAGS') == ONE_THREAD)")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    held = subprocess.run([sys.executable, "-c", code], env={**env, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    free = subprocess.run([sys.executable, "-c", code], env={**env, "OMP_NUM_THREADS": "2"},
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (held.stdout.strip(), free.stdout.strip()) == ("True", "False"), held.stderr[-2000:]


@pytest.mark.skipif(jax is None, reason="the compiled engine needs JAX (pip install jax)")
def test_flags_appended_to_the_one_thread_value_reach_xla(tmp_path):
    """ONE_THREAD holds --flags only: XLA ignores a word that is not a flag and every flag
    after it, so a flag a user appends (here XLA's dump folder) must still take effect."""
    import os
    import subprocess

    from fco_ray.runtime.xla import ONE_THREAD

    code = "import jax; jax.jit(lambda x: x + 1)(1.0).block_until_ready()"
    env = {**os.environ, "XLA_FLAGS": f"{ONE_THREAD} --xla_dump_to={tmp_path}", "JAX_PLATFORMS": "cpu",
           "JAX_ENABLE_COMPILATION_CACHE": "false"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert any(tmp_path.iterdir()), f"XLA_FLAGS={env['XLA_FLAGS']!r}: the appended flag was ignored"
