"""Every benchmark in benchmarks/ still starts and runs: its `--quick` smoke run (seconds, its
own side only: peer_flower.py without Flower) exits 0 and writes nothing into the recorded
results (benchmarks/results/, results/). A refactor that breaks a benchmark's imports or
calls fails here instead of at the next measurement."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import recorded_files

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

#: script -> the arguments of its smoke run, besides --quick
LOCAL = {
    "auto_engine.py": [],  # device auto beside device cpu on lone runs
    "blas_floor.py": [],
    "compiled_rounds.py": [],
    "accelerators.py": [],  # every registered accelerator beside its rule
    "config_errors.py": [],
    "device_metrics.py": [],  # evaluating every round vs every 10 on the device backend (jax-cpu)  # bad run and sweep files refused, beside `python -c pass`  # the device backend on JAX's CPU platform beside numba
    "e7_fused.py": [],
    "e7_memory.py": [],
    "e7_round.py": [],
    "engine_unit.py": [],
    "fused.py": [],
    "lam_path.py": [],  # a lam path one value at a time: programs shared beside compiled anew
    "mlflow_sqlite.py": [],
    "mlflow_sweep_log.py": [],
    "mlflow_new_store.py": [],  # a new store copied from the template beside MLflow's migrations
    "mlflow_ui.py": [],  # the MLflow UI of `fco-ray ui` beside mlflow ui with its defaults
    "run.py": ["--only", "local,scaling"],
    "test_suite.py": [],  # one small test file as each run
    "suite_processes.py": [],  # CPU by kind of process, on one small test file
    "suite_profile.py": [],  # JAX's compilation per test file, on one small test file
}
#: those that start a Ray cluster
RAY = {
    "peer_flower.py": [],  # fco_ray's local and ray backends; Flower's side needs its own venv
    "ray_round.py": [],
    "ray_scaling.py": [],
    "ray_startup.py": [],
    "run.py": ["--only", "ray,sweep"],
}
#: modules, not scripts: Flower's side of peer_flower.py (imported by Flower's simulation in
#: benchmarks/.venv-flower), the machine description and record helpers the records share,
#: and the pytest plugin of suite_profile.py
NOT_A_SCRIPT = {"flower_task.py", "machine.py", "record.py", "jit_events.py"}
#: smoke runs that a test elsewhere makes, with more checks (on JAX's CPU platform)
ELSEWHERE = {"gpu.py": "tests/engine/test_device.py::test_gpu_benchmark_quick_mode_runs"}
#: experiments that write the results pages' records, in results/ (their smoke runs here too)
EXPERIMENTS = {"e7_calibration.py": [], "e7_fig2.py": []}


def recorded() -> dict[str, int]:
    """The recorded results' files and their modification times."""
    return recorded_files(BENCHMARKS / "results", ROOT / "results")


def smoke(script: str, args: list[str], tmp_path: Path, folder: Path = BENCHMARKS) -> None:
    before = recorded()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(folder / script), "--quick", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{script} --quick {args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert recorded() == before, f"{script} --quick wrote into the recorded results"


def test_every_benchmark_has_a_smoke_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")} - {"__init__.py"}
    assert scripts == set(LOCAL) | set(RAY) | NOT_A_SCRIPT | set(ELSEWHERE)
    assert all((ROOT / "results" / name).is_file() for name in EXPERIMENTS)
    for where in ELSEWHERE.values():
        path, name = where.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), where


#: the scripts that time the test suite: the pytest they start inherits their environment
SUITE_TIMERS = ("test_suite", "suite_profile", "suite_processes")


def test_the_suite_timers_leave_the_environment_to_the_tests():
    """tests/conftest.py sets XLA_FLAGS and the thread counts per session unless they are set:
    a timer that set them on import (test_suite.py imported device_metrics.py's cpu_model, and
    with it one thread for XLA and BLAS) timed the fast subset without its XLA flags."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    code = ("import os; before = dict(os.environ); "
            + "; ".join(f"import benchmarks.{name}" for name in SUITE_TIMERS)
            + "; print(sorted(k for k in {*before, *os.environ} if before.get(k) != os.environ.get(k)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(LOCAL))
def test_benchmark_quick(script, tmp_path):
    smoke(script, LOCAL[script], tmp_path)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("script", sorted(RAY))
def test_ray_benchmark_quick(script, tmp_path):
    smoke(script, RAY[script], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(EXPERIMENTS))
def test_experiment_quick(script, tmp_path):
    smoke(script, EXPERIMENTS[script], tmp_path, ROOT / "results")
