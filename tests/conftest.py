"""Fixtures shared by the test folders: unit/ (functions and operators), engine/ (rounds run
in this process), ray/ (Ray clusters, jobs, faults), e2e/ (the CLI, the API, sweeps, reports,
the README and docs/)."""
import os
import sys
from pathlib import Path

# Bytecode caches are written (to the git-ignored __pycache__ folders) even where the
# environment sets PYTHONDONTWRITEBYTECODE, as some containers and CI images do: without them
# each worker rewrites the assertions of every test module at collection (`pytest --collect-only
# -n 0 -m "not slow and not ray"`: 19.6 s with the variable, 15.2 s without, on 2 cores) and each
# command a test starts compiles fco_ray's sources again. Set in the
# controller before the workers start, so they and the processes tests start inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread of BLAS and XLA per worker process: the workers already fill the cores, and
    # two workers each running two BLAS threads on 2 cores only contend (set before NumPy loads;
    # the processes a test starts inherit it; XLA's in `session_xla_flags`)
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

# JAX's persistent compilation cache for the tests (and the processes they start): the
# device tests compile the same programs at every run, and a warm cache takes most of that
# off the daily loop (tests/engine/test_device*.py and friends: 25 -> 17 s). Programs are
# keyed by their own text, JAX's version and flags, so a changed rule compiles anew.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fco-ray-tests", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
# no size bound inside JAX: with one, every write lists the whole cache and reads each entry's
# access-time file (thousands of files: 0.1-0.2 s a write), and every read takes a lock shared
# by the workers and writes that file. The bound (JAX_CACHE_BYTES) is kept by `prune_jax_cache`
# once a session instead.
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", "-1")
JAX_CACHE_BYTES = 512 << 20

import numpy as np
import pytest


class LocalRay:
    """The session's one local Ray cluster (2 CPUs, no dashboard), connected to this process:
    started by the first test that needs it and kept for every later one, instead of a
    cluster per module (5-8 s each to start and stop on 2 cores). `down()` ends it for a test
    that needs Ray down in this process (a cluster of its own, or a check that nothing
    started Ray); the next test that needs it starts it again. A helper process owns it
    (tests/cluster_process.py: starting Ray's daemons from here would fork a process that
    may have used JAX); workers' output stays out of this process (`log_to_driver` off, as
    on fco-ray's own clusters), or it would land late inside a later test's captured output."""

    def __init__(self):
        self.cluster = None

    def up(self) -> None:
        ray = pytest.importorskip("ray")
        if not ray.is_initialized():
            from tests.cluster_process import ClusterProcess

            self.down()
            self.cluster = ClusterProcess(head_cpus=2)

    def down(self) -> None:
        ray = pytest.importorskip("ray")
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        if ray.is_initialized():
            ray.shutdown()


#: test files that must not run beside each other's kind in another worker: `ray start --head`
#: takes Ray's fixed default ports (the client server's 10001); the network-namespace hosts
SERIAL = {"tests/ray/test_cluster.py": "ray", "tests/ray/test_netns_cluster.py": "netns",
          "tests/ray/test_job_submit.py": "netns"}


def prune_jax_cache(folder: Path, limit: int = JAX_CACHE_BYTES) -> int:
    """Delete the least recently used files of JAX's persistent cache (by the later of their
    access and write times) until it holds at most `limit` bytes; returns how many went. Run
    once a session, before any worker starts."""
    if not folder.is_dir():
        return 0
    entries = []
    for path in folder.iterdir():
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        entries.append((max(st.st_atime, st.st_mtime), st.st_size, path))
    total = sum(size for _, size, _ in entries)
    gone = 0
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        path.unlink(missing_ok=True)
        total -= size
        gone += 1
    return gone


def session_xla_flags(config) -> str:
    """XLA_FLAGS for a process that runs tests (and the processes they start), unless set:
    - in a worker, one thread for XLA's CPU pool (as for BLAS above);
    - where the session leaves out the slow tests (`-m "not slow ..."`, the fast subset), LLVM's
      optimization level 0 instead of 3: the fast tests run a few rounds on small problems, and
      compiling their ~620 programs is most of their cost where the cache is cold, as on a fresh
      clone (the fast subset 153 -> 125-135 s on 2 cores; warm 74-88 s either way). The slow tests
      run long compiled loops, which level 0 runs about 2x slower (the E5 claims 9 -> 16 s), so
      a session with them keeps XLA's default. The programs are the same rules through the
      same XLA passes; LLVM's code differs in speed and, in a few functions (tanh, sin), in the
      last bit, which the tests' tolerances hold. fco-ray itself compiles at the default level."""
    from _pytest.mark.expression import Expression

    flags = ["--xla_cpu_multi_thread_eigen=false"] if hasattr(config, "workerinput") else []
    markexpr = config.getoption("markexpr", "")
    if markexpr:  # does it select a slow test, with its other marks all set or none (`-m ray`: yes)?
        selects = Expression.compile(markexpr).evaluate
        if not any(selects(lambda name, others=others, **kw: name == "slow" or others) for others in (False, True)):
            flags.append("--xla_backend_optimization_level=0")
    return " ".join(flags)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers)
        prune_jax_cache(Path(os.environ["JAX_COMPILATION_CACHE_DIR"]))
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        flags = session_xla_flags(config)  # (before the test modules load JAX)
        if flags:
            os.environ.setdefault("XLA_FLAGS", flags)
    check_loadgroup(config)


def check_loadgroup(config):
    """`--dist loadgroup` (the groups of `pytest_collection_modifyitems`) needs a pytest whose
    node id pytest-xdist can extend with `@group`: it writes `item._nodeid`, which pytest 9.2
    no longer reads (pyproject.toml's test extra pins below it). With another pytest xdist
    would silently group nothing; stop before any test runs instead."""
    if (config.getoption("dist", None) != "loadgroup" or not config.getoption("numprocesses", None)
            or hasattr(config, "workerinput")):
        return
    from _pytest.nodes import Node

    probe = object.__new__(Node)
    probe._nodeid = "probe@group"
    try:
        grouped = Node.nodeid.fget(probe) == "probe@group"
    except AttributeError:
        grouped = False
    if not grouped:
        raise pytest.UsageError(
            f"pytest {pytest.__version__} keeps node ids where pytest-xdist cannot add its "
            "'@group', so --dist loadgroup would group nothing (tests/conftest.py's groups keep "
            "Ray clusters apart); install the test extra's versions: pip install -e '.[test]'")


#: test files whose neighbouring tests compile the same numba kernels first (E1's least-squares
#: steps; E7's SVRG and SDCA passes, lone and fused): with empty caches, two workers running
#: them side by side left one waiting on the other's compilation (`fco_ray.ops.kernels.kernel`
#: compiles a kernel in one process at a time), 20-25 s of an idle core in the fast subset
#: (`pytest -m "not slow and not ray"`, per-test wall minus CPU time). In one worker the first
#: test compiles and the next ones load, while the other worker runs other files.
ONE_WORKER = {"tests/engine/test_checkpoint.py", "tests/e2e/test_api.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`-n 2 --dist loadgroup`, set in pyproject.toml) the tests that use
    the session's Ray cluster in this process (`LocalRay`) all run in one worker, which keeps
    one cluster for them; so do the files of `SERIAL`, per kind, and each file of
    `ONE_WORKER`. Every other test, those that start a cluster of their own in a subprocess
    included, goes to whichever worker is free."""
    for item in items:
        path = item.nodeid.split("::")[0]
        group = SERIAL.get(path) or (path if path in ONE_WORKER else None)
        names = set(getattr(item, "fixturenames", ()))
        if "ray_cluster" in names or ("local_ray" in names and "ray_down" not in names):
            group = "ray"  # (`ray_down` alone needs no cluster: any worker will do)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def local_ray():
    cluster = LocalRay()
    yield cluster
    cluster.down()


@pytest.fixture(scope="module")
def ray_cluster(local_ray):
    """The session's local Ray cluster, up for the module's tests (`LocalRay`)."""
    local_ray.up()
    return local_ray


@pytest.fixture
def ray_down(local_ray):
    """No Ray connection in this process when the test starts (`LocalRay.down`)."""
    local_ray.down()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh current directory: the defaults (./mlflow.db, ./ray_results) land here if
    anywhere; no tracking URI or Ray address is inherited from the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


#: the E7 generator's settings before its calibration to the paper's data statistics
#: (sweeps/e7_fsvrg_uncalibrated.yaml): the shared text fixtures' thresholds were set on them
UNCALIBRATED_TEXT = {"topic_concentration": 0.1, "zipf_exponent": 1.0, "signal": 3.0,
                     "author_bias": 1.0, "topic_signal": 0.0, "positive_share": None}


def text_problem(seed=1, lam=None, **gen):
    """A generated E7 sparse text problem (fco_ray.data.text_generator), on the uncalibrated
    settings unless `gen` names others."""
    from fco_ray.data.text_generator import generate_text_nodes
    from fco_ray.problems.text import SparseTextLogReg

    train, test = generate_text_nodes(seed=seed, **{**UNCALIBRATED_TEXT, **gen})
    return SparseTextLogReg.from_nodes(train, test, lam=lam)


@pytest.fixture(scope="module")
def tiny():
    """An E7 text problem of 6 clients and 50 words."""
    return text_problem(clients=6, min_samples=5, max_samples=40, dim=50, words_per_doc=6, topics=3)


@pytest.fixture(scope="module")
def small():
    """An E7 text problem of 20 clients and 300 words."""
    return text_problem(clients=20, min_samples=20, max_samples=300, dim=300, words_per_doc=10)


@pytest.fixture(scope="module")
def store(request, tmp_path_factory):
    """A toy sweep (tests/e2e/test_report.py's `make_sweep`) in a new SQLite MLflow store; a
    module may name a smaller grid in `STORE_GRID` (`make_sweep`'s keyword arguments)."""
    from tests.e2e.test_report import make_sweep

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client, pid, runs = make_sweep(uri, root / "mlartifacts", **getattr(request.module, "STORE_GRID", {}))
    return {"uri": uri, "client": client, "pid": pid, "runs": runs, "root": root}


def _patch_new_mlflow_stores(state: dict) -> None:
    """New SQLite stores that MLflow opens in this process start from fco-ray's template
    (`fco_ray.tracking.template`), also those a test opens with MLflow's own client."""
    import mlflow.store.db.utils as utils

    from fco_ray.tracking.template import keep_as_template, start_from_template

    original = utils._initialize_tables

    def initialize(engine):
        path = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
        if not path or path == ":memory:":
            return original(engine)
        if not start_from_template(Path(path)):  # no template yet: this store becomes it
            original(engine)
            keep_as_template(Path(path))

    utils._initialize_tables = initialize
    state.update(module=utils, original=original)


@pytest.fixture(autouse=True, scope="session")
def _mlflow_template():
    """A new MLflow SQLite store runs MLflow's schema migrations: 2-7 s on 2 cores, paid by
    every test (and every module-scoped fixture) that opens a new store. fco-ray's own stores
    start from a copy of one migrated store (`fco_ray.tracking.template`, in the user's cache:
    every process, the commands tests start included); here so do those a test opens with
    MLflow's client directly. Patched at the session's start when the collected test files
    already imported MLflow (the fast subset does: then the module-scoped stores are copies
    too), else once a test has imported MLflow's store code."""
    state: dict = {}
    if "mlflow" in sys.modules:
        _patch_new_mlflow_stores(state)
    yield state
    if "original" in state:
        state["module"]._initialize_tables = state["original"]


@pytest.fixture(autouse=True)
def _new_mlflow_stores_from_the_template(_mlflow_template):
    if "original" not in _mlflow_template and "mlflow.store.db.utils" in sys.modules:
        _patch_new_mlflow_stores(_mlflow_template)
