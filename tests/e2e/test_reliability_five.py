"""Reliability and security, round five (issue 44): the repository's scripts wrote through
planted links, a user's class under a built-in name replaced it silently, `run_grid`'s
`max_group` was unchecked, the JAX environment could kill or misreport the default engine,
a group too big for memory was refused only after building the problem. Each case fails on
the code before its fix."""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import pytest

from fco_ray import ConfigError

ROOT = Path(__file__).resolve().parents[2]


# --- 1. every file a script writes goes through files.replacing ---------------------------------

#: calls that write a file at a path they are given: only inside `with replacing(...)`
_NEEDS_TEMP = {"savefig", "savez", "savez_compressed", "save"}
#: calls that write a path directly: never (files.write_file / append_file instead)
_NEVER = {"write_text", "write_bytes", "copyfile", "copy", "copy2", "symlink_to", "hardlink_to"}


def _raw_writes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, in_replacing):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            in_replacing = in_replacing or any(
                isinstance(item.context_expr, ast.Call) and getattr(
                    item.context_expr.func, "id", getattr(item.context_expr.func, "attr", "")) == "replacing"
                for item in node.items)
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            where = f"{path.relative_to(ROOT)}:{node.lineno} {name}"
            owner = func.value if isinstance(func, ast.Attribute) else None
            if name in _NEVER and not (name == "copy" and not isinstance(owner, ast.Name)) \
                    and not (name in ("copy", "save") and getattr(owner, "id", "") not in ("shutil", "np")):
                found.append(where)
            elif name in _NEEDS_TEMP and (name != "save" or getattr(owner, "id", "") == "np") \
                    and not in_replacing:
                found.append(where)
            elif name in ("to_csv", "to_json", "to_parquet", "to_pickle") and (
                    node.args or any(k.arg == "path_or_buf" for k in node.keywords)):
                found.append(where)
            elif name == "open" and (isinstance(func, ast.Name) or getattr(owner, "id", "") != "os"):
                mode = node.args[1] if len(node.args) > 1 and isinstance(func, ast.Name) else (
                    node.args[0] if node.args and isinstance(func, ast.Attribute) else None)
                mode = next((k.value for k in node.keywords if k.arg == "mode"), mode)
                text = mode.value if isinstance(mode, ast.Constant) else "r"
                if set(str(text)) & set("wax+") and not in_replacing:
                    found.append(f"{where}({text!r})")
            elif name == "open" and getattr(owner, "id", "") == "os" and path.name != "files.py":
                found.append(where)
        for child in ast.iter_child_nodes(node):
            visit(child, in_replacing)

    visit(tree, False)
    return found


def test_every_script_writes_through_the_one_safe_writer():
    """No script of the repository (benchmarks/, results/, the package behind the CLI) writes
    a file but through `fco_ray.runtime.files` (a new file replacing the name, or an append
    that refuses links). Before: `write_text`, `to_csv(path)`, `savefig(path)`, `open(.., "a")`
    in 30 files, each following a planted link."""
    files = [*sorted((ROOT / "benchmarks").glob("*.py")), *sorted((ROOT / "results").glob("*.py")),
             *(f for f in sorted((ROOT / "fco_ray").rglob("*.py")) if f.name != "files.py")]
    assert len(files) > 60
    raw = [w for f in files for w in _raw_writes(f)]
    assert raw == [], "writes that bypass fco_ray.runtime.files:\n" + "\n".join(raw)


def _script(relative: str):
    spec = importlib.util.spec_from_file_location(f"script_{Path(relative).stem}", ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def outside(tmp_path):
    """Files outside the clone that planted links point to: none may change."""
    folder = tmp_path / "outside"
    folder.mkdir()
    made = {}

    def plant(link: Path) -> Path:
        target = folder / f"victim{len(made)}"
        target.write_text(f"theirs {len(made)}")
        made[target] = target.read_bytes()
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)
        return link

    yield plant
    assert made, "nothing planted"
    assert {p: p.read_bytes() for p in made} == made  # the outside files are untouched


def test_planted_links_under_the_scripts_default_folders_are_replaced(outside, tmp_path, monkeypatch,
                                                                       capsys):
    """A clone shipping links at the scripts' default outputs: each script writes its own
    file in place of the link, and the files the links led to stay as they were.
    Before: `benchmarks/config_errors.py --repeats 1` and `results/conventions.py --quick --out
    DIR` overwrote the outside files; `fco-ray run`'s model.npz, a sweep's lock file, an E7
    record appended to likewise."""
    links = []
    # benchmarks/config_errors.py: default benchmarks/results/config_errors.{md,json}
    bench = _script("benchmarks/config_errors.py")
    results = tmp_path / "clone" / "benchmarks" / "results"
    links += [outside(results / "config_errors.md"), outside(results / "config_errors.json")]
    monkeypatch.setattr(bench, "RESULTS", results)
    monkeypatch.setattr(bench, "time_case", lambda argv, work, expect: 0.1)  # the cases' timing
    monkeypatch.setattr(sys, "argv", ["config_errors.py", "--repeats", "1"])
    assert bench.main() == 0
    # results/conventions.py --quick --out DIR (default results/)
    conventions = _script("results/conventions.py")
    monkeypatch.setattr(conventions, "lam_scan", lambda exp, quick: {})
    monkeypatch.setattr(conventions, "shift_boundary", lambda quick: {})
    out = tmp_path / "clone" / "results"
    links.append(outside(out / "conventions.json"))
    assert conventions.main(["--quick", "--out", str(out)]) == 0
    # fco-ray run's artifacts (model.npz), written into the run's folder
    from fco_ray.api import resolve
    from fco_ray.tracking.runs import write_artifacts

    artifacts = tmp_path / "clone" / "artifacts"
    links.append(outside(artifacts / "model.npz"))
    import numpy as np

    write_artifacts(resolve({"problem": {"name": "lasso"}, "algorithm": {"name": "fedavg"}}),
                    {"w": np.zeros(3)}, artifacts)
    for link in links:
        assert link.is_file() and not link.is_symlink(), link
    # written in place (a lock keeps its inode, a record grows): a link is refused, not followed
    from fco_ray.runtime.files import append_file
    from fco_ray.sweep.storage import sweep_lock

    storage = tmp_path / "clone" / "ray_results"
    outside(storage / ".mine.lock")
    with pytest.raises(ConfigError, match="symbolic link"), sweep_lock(storage, "mine"):
        pass
    record = outside(tmp_path / "clone" / "e7_fig2.jsonl")
    with pytest.raises(ConfigError, match="symbolic link"):
        append_file(record, "{}\n")
    hard = tmp_path / "clone" / "hard.jsonl"
    os.link(outside(tmp_path / "clone" / "spare").resolve(), hard)
    with pytest.raises(ConfigError, match="hard links"):
        append_file(hard, "{}\n")


# --- 2. a user's class under a name already taken -----------------------------------------------

def test_a_class_under_a_builtin_name_is_refused_unless_it_says_it_replaces():
    """Before: `register_algorithm` on a class named `fedavg` silently replaced the built-in
    (a plain `fedavg` config then ran the user's class); `register_problem("lasso", ...)`
    overwrote the built-in problem the same way."""
    import fco_ray
    from fco_ray.algorithms import ALGORITHMS
    from fco_ray.problems import PROBLEMS, LassoParams

    builtin = ALGORITHMS["fedavg"]

    class MyFedAvg(builtin):
        name = "fedavg"

    with pytest.raises(ConfigError) as e:
        fco_ray.register_algorithm(MyFedAvg)
    message = str(e.value)
    assert "'fedavg'" in message and f"{builtin.__module__}.{builtin.__qualname__}" in message
    assert "MyFedAvg" in message and "replace=True" in message
    assert ALGORITHMS["fedavg"] is builtin
    spec = PROBLEMS["lasso"]

    class MyLasso(LassoParams):
        pass

    with pytest.raises(ConfigError, match=r"'lasso'.*LassoParams.*MyLasso.*replace=True"):
        fco_ray.register_problem("lasso", MyLasso)(lambda p, seed: None)
    assert PROBLEMS["lasso"] is spec
    # said on purpose, it replaces (and is put back); the same class twice is no clash
    try:
        assert fco_ray.register_algorithm(replace=True)(MyFedAvg) is MyFedAvg
        assert ALGORITHMS["fedavg"] is MyFedAvg
        fco_ray.register_problem("lasso", MyLasso, replace=True)(spec.build)
        assert PROBLEMS["lasso"].params is MyLasso
    finally:
        ALGORITHMS["fedavg"] = builtin
        PROBLEMS["lasso"] = spec
    assert fco_ray.register_algorithm(builtin) is builtin


# --- 3. run_grid's max_group: the checks of tune.fuse_max --------------------------------------

@pytest.mark.parametrize("value, why", [(0, "greater than or equal to 1"), (-1, "greater than or equal to 1"),
                                        (1.5, "fractional part"), (True, "boolean"),
                                        (10**6, "less than or equal to 1024")])
def test_run_grid_max_group_is_checked_as_fuse_max(value, why):
    """Before: 0 silently meant the default, -1 raised a bare KeyError, 1.5 a TypeError."""
    import fco_ray
    from fco_ray.sweep import load_sweep

    config = {"problem": {"name": "lasso", "clients": 4, "samples": 8, "dim": 6, "support": 2},
              "algorithm": {"name": "fedavg"}, "rounds": 2}
    with pytest.raises(ConfigError, match=why) as api:
        fco_ray.run_grid(config, {"algorithm.client_lr": [0.1, 0.01]}, max_group=value)
    assert str(api.value).startswith("run_grid max_group (a sweep file's tune.fuse_max): ")
    with pytest.raises(ConfigError) as sweep:
        load_sweep(ROOT / "sweeps" / "quickstart.yaml", [f"tune.fuse_max={value}"])
    assert str(api.value).split("): ", 1)[1] in str(sweep.value)


# --- 4. the default engine and the JAX environment ----------------------------------------------

def test_auto_survives_xla_flags_that_abort_jax(monkeypatch, capsys):
    """Before: `XLA_FLAGS=--xla_bogus_flag=1 fco-ray run` of an E5 l1 size (where `auto`
    picks compiled rounds) died in XLA's fatal "Unknown flag" line. The probe runs in a
    fresh process, once per process and flags; the run takes the NumPy engine with a note."""
    from fco_ray.backends import choice
    from fco_ray.backends.device import environment

    monkeypatch.setenv("XLA_FLAGS", "--xla_bogus_flag=1")
    from fco_ray.runtime import xla

    monkeypatch.setattr(xla, "_PROBED", {})
    monkeypatch.setattr(xla, "DROPPED", None)
    monkeypatch.setattr(choice, "_NOTED", set())
    monkeypatch.setattr(environment, "_jax_running", lambda: False)  # as in a fresh CLI process
    e5_l1 = {"group": 1, "rounds": 400, "eval_every": 4, "work": 900_000}  # the speeds' E5 l1 case
    assert choice.chosen_device("bilinear_l1", "feddualex", **e5_l1) == "cpu"
    assert choice.chosen_device("bilinear_l1", "feddualex", **e5_l1) == "cpu"  # cached: one probe
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "note: backend.device auto runs the NumPy engine" in err
    assert "Unknown flag in XLA_FLAGS: --xla_bogus_flag=1" in err
    assert list(xla._PROBED) == ["--xla_bogus_flag=1"]


def test_flags_a_probe_accepted_are_not_probed_again_in_the_processes_started_with_them():
    """A probe starts JAX (0.7 s on 2 cores): a process whose XLA_FLAGS a probe accepted
    records them in the environment, and the processes it starts with the same flags (a
    sweep's Ray workers and trials) skip the probe. Other flags are still probed:
    `test_a_process_with_xla_flags_that_abort_jax_survives_loading_fco_ray` starts one with
    bogus flags from this process, which recorded its own."""
    import subprocess

    flags = "--xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=1"
    child = "import fco_ray.runtime.xla as x; print(list(x._PROBED))"
    code = ("import os, subprocess, sys; import fco_ray.runtime.xla as x; "
            "print(list(x._PROBED)); print(os.environ.get(x.SCREENED)); "
            f"print(subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True).stdout.strip())")
    env = {k: v for k, v in os.environ.items() if k != "FCO_RAY_XLA_FLAGS_SCREENED"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**env, "XLA_FLAGS": flags}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [repr([flags]), flags, "[]"]


RUN_JAX_CPU = ("problem: {name: lasso, clients: 4, samples_per_client: 8, dim: 6, support: 2}\n"
               "algorithm: {name: fedavg, clients_per_round: 2}\nrounds: 2\n"
               "backend: {name: local, device: DEVICE}\n")


@pytest.mark.parametrize("device, env, says", [
    ("jax-cpu", {"JAX_PLATFORMS": "bogus"}, "JAX_PLATFORMS='bogus' leaves JAX no CPU platform"),
    ("jax-cpu", {"JAX_PLATFORMS": "cuda"}, "JAX_PLATFORMS='cuda' leaves JAX no CPU platform"),
    ("jax-cpu", {"PYTHONPATH": "EMPTY"}, "a folder that is not JAX"),
    ("cuda", {"JAX_PLATFORMS": "cpu"}, "JAX_PLATFORMS='cpu' leaves JAX no GPU platform"),
])
def test_a_jax_environment_that_stops_the_device_is_named(tmp_path, device, env, says):
    """Before: JAX_PLATFORMS=bogus with jax-cpu said "'cuda' asked for ... install the GPU
    extra"; JAX_PLATFORMS=cuda gave `AssertionError: ` with no text; an empty `jax/` on
    PYTHONPATH "module 'jax' has no attribute 'config'"."""
    import subprocess

    (tmp_path / "run.yaml").write_text(RUN_JAX_CPU.replace("DEVICE", device))
    environ = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db", **env}
    if env.get("PYTHONPATH") == "EMPTY":
        (tmp_path / "shadow" / "jax").mkdir(parents=True)  # shadows the installed JAX:
        (tmp_path / "shadow" / "jax" / "__init__.py").write_text("")  # (where none is, so does the bare folder)
        environ["PYTHONPATH"] = str(tmp_path / "shadow")
    done = subprocess.run([sys.executable, "-m", "fco_ray", "run", "run.yaml"], cwd=tmp_path,
                          env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("fco-ray: error: ") and f"backend.device: {device!r} asked for, but " in line, line
    assert says in line and "install the GPU extra" not in line


# --- 5. a group too big for memory: refused from the estimate, before building -------------------

def test_a_group_too_big_for_memory_is_refused_before_the_problem_is_built(monkeypatch):
    """Before: 1,024 members at dim 100,000 on jax-cpu were refused after 32 s of building the
    problem and loading JAX."""
    import fco_ray
    from fco_ray.core import plan

    def no_build(cfg):
        raise AssertionError("the problem was built before the group was refused")

    monkeypatch.setattr(plan, "build", no_build)
    config = {"problem": {"name": "lasso", "dim": 100_000}, "algorithm": {"name": "fedavg"},
              "rounds": 2, "backend": {"name": "local", "device": "jax-cpu"}}
    grid = {"algorithm.client_lr": [10.0 ** -k for k in range(1, 33)],
            "algorithm.server_lr": [float(k) for k in range(1, 33)]}
    with pytest.raises(ConfigError, match=r"backend.device 'jax-cpu': a group of 1024 configurations "
                       r".*problem.dim=100000.*more than the .* available"):
        fco_ray.run_grid(config, grid, max_group=1024)


def test_a_process_with_xla_flags_that_abort_jax_survives_loading_fco_ray():
    """fco_ray's rule modules start JAX on import: before, `XLA_FLAGS=--xla_bogus_flag=1
    fco-ray run` died there (rc 1, XLA's fatal line). Now the flags are screened at `import
    fco_ray` (a subprocess tries them), removed, and `auto` says why it runs the NumPy engine."""
    import subprocess

    code = ("import fco_ray.problems, jax; jax.devices('cpu'); "
            "from fco_ray.backends.choice import jax_loads; print(jax_loads())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XLA_FLAGS": "--xla_bogus_flag=1"}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
    assert "note: backend.device auto runs the NumPy engine" in done.stderr
    assert "Unknown flag in XLA_FLAGS: --xla_bogus_flag=1" in done.stderr
