"""Faults injected on purpose, outcome asserted (README "Reliability"):

- a Ray client actor SIGKILLed mid-round is restarted and the round redone: same numbers;
- a Ray client actor that held client state (CoCoA+ duals) and is restarted: a clear error;
- a Tune trial process SIGKILLed mid-run is rerun by Tune from its last checkpoint (not
  from round 0): its MLflow child run holds every round exactly once, equal to an
  undisturbed run, and ends once;
- a trial whose evaluation raises LinAlgError ends `diverged` with its last finite metrics,
  ranks last, and the sweep carries on;
- an MLflow store that cannot be used: the sweep / run fails fast, before any work;
- an MLflow store lost mid-sweep: the sweep stops, `--resume` logs every round once.
"""
import os
import signal
import socket
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest
import yaml

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402

import jax  # noqa: E402

import fco_ray  # noqa: E402
from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.api import resolve  # noqa: E402
from fco_ray.backends.ray_backend import RayBackend  # noqa: E402
from fco_ray.cli import main  # noqa: E402
from fco_ray.core.plan import build as make_problem  # noqa: E402
from fco_ray.data.text_generator import generate_text_nodes  # noqa: E402
from fco_ray.problems.text import SparseTextLogReg  # noqa: E402
from fco_ray.rules.algorithms import PrimalAveraging as PrimalAveragingRule  # noqa: E402
from fco_ray.sweep import SweepInterrupted, run_sweep  # noqa: E402
from fco_ray.sweep.logging import MLflowLogger  # noqa: E402
from fco_ray.tracking.queries import children, find_parent, trials_frame  # noqa: E402
from fco_ray.tracking.store import Store  # noqa: E402
from tests.cluster_process import ClusterProcess  # noqa: E402

from tests.helpers import run_one  # noqa: E402

LASSO = {"name": "lasso", "clients": 16, "dim": 64, "support": 8, "val_clients": 4,
         "samples_per_client": 32}


# --- a problem whose evaluation fails numerically at a chosen evaluation ------------------

def register_failing_lasso():
    """Register `failing_lasso`: the lasso problem whose `fail_at_eval`-th evaluation
    (1-based; 0: never) raises LinAlgError, as an SVD of an exploding iterate does.
    Also run in every Ray worker (worker_process_setup_hook), so trials build it by name;
    self-contained because it is shipped to them by value."""
    from typing import Literal
    
    import numpy as np

    from fco_ray.problems import PROBLEMS, LassoParams, register_problem
    from fco_ray.problems.linear import make_lasso

    if "failing_lasso" in PROBLEMS:
        return

    class FailingLassoParams(LassoParams):
        name: Literal["failing_lasso"] = "failing_lasso"
        fail_at_eval: int = 0

    @register_problem("failing_lasso", FailingLassoParams)
    def build(p, seed):
        problem = make_lasso(seed=seed, **p.model_dump(exclude={"name", "data_seed", "fail_at_eval"}))
        # evaluations counted per process: a sweep's driver evaluates the problem once to
        # check its metric names, then hands that instance to the trial (counts and all)
        evaluate, calls = problem.evaluate, {}

        def failing_evaluate(params):
            import os

            calls[os.getpid()] = calls.get(os.getpid(), 0) + 1
            if calls[os.getpid()] == p.fail_at_eval:
                raise np.linalg.LinAlgError("SVD did not converge")
            return evaluate(params)

        problem.evaluate = failing_evaluate
        return problem


register_failing_lasso()
# Ray workers cannot import this test module: ship its functions and classes by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(local_ray):
    local_ray.down()  # a job of its own: the hook registers the failing problem in its workers
    c = ClusterProcess(head_cpus=2, runtime_env={"worker_process_setup_hook": register_failing_lasso})
    yield
    c.shutdown()


# --- a client actor killed mid-round -------------------------------------------------------

class HangRule(PrimalAveragingRule):
    """FedMiD's rule whose first client call of round `at_round` (on the host, from inside the
    compiled client program) writes its process id to `marker` and then hangs, so that the
    test can SIGKILL that actor in the middle of the round."""

    def __init__(self, hp, algorithm):
        super().__init__(hp, algorithm)
        self.marker, self.at_round = algorithm.marker, algorithm.at_round

    def hang(self, rnd) -> None:
        if int(rnd) != self.at_round:
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # the redone call, on the restarted actor
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(300)  # killed long before

    def client(self, problem, data, payload, hyper, client):
        jax.debug.callback(self.hang, client.round)
        return super().client(problem, data, payload, hyper, client)


class HangOnce(ALGORITHMS["fedmid"]):
    """FedMiD running `HangRule`."""

    rule = HangRule

    def __init__(self, hp, marker: str, at_round: int):
        super().__init__(hp)
        self.marker, self.at_round = marker, at_round


def kill_when_written(marker, pids: list, killed: list) -> None:
    """Wait for `marker`, check it names one of the actors' processes, SIGKILL it."""
    deadline = time.monotonic() + 120
    while not (os.path.exists(marker) and open(marker).read()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(open(marker).read())
    assert pid in pids  # an actor of this backend, not some other process
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


@pytest.mark.ray
def test_client_actor_killed_mid_round_is_restarted_and_the_round_redone(cluster, tmp_path):
    cfg = resolve({"problem": LASSO, "algorithm": {"name": "fedmid", "client_lr": 0.01,
                                                   "clients_per_round": 8, "local_steps": 5}})
    problem = make_problem(cfg)
    run = dict(rounds=12, eval_every=2, seed=4)
    backend = RayBackend(problem, actors=2, cpus_per_actor=0.5)
    try:
        pids = [s["pid"] for s in backend.stats()]
        calm = run_one(problem, HangOnce(cfg.algorithm, str(tmp_path / "never"), -1), backend, **run)
        marker, killed = str(tmp_path / "hung"), []
        killer = threading.Thread(target=kill_when_written, args=(marker, pids, killed))
        killer.start()
        hurt = run_one(problem, HangOnce(cfg.algorithm, marker, 7), backend, **run)
        killer.join()
        after = [s["pid"] for s in backend.stats()]
    finally:
        backend.close()
    assert killed and killed[0] not in after and len(set(after) - set(pids)) == 1  # one restart
    assert calm.status == hurt.status == "finished"
    calm, hurt = pd.DataFrame(calm.records), pd.DataFrame(hurt.records)
    assert list(hurt["round"]) == [0, 2, 4, 6, 8, 10, 12]
    np.testing.assert_allclose(hurt.to_numpy(float), calm.to_numpy(float), rtol=1e-12, atol=0)
    assert calm["train_loss"].iloc[-1] < 0.9 * calm["train_loss"].iloc[0]


@pytest.mark.ray
def test_restarted_actor_that_lost_client_state_is_an_error(cluster):
    """CoCoA+ keeps its duals on the actors: a restart cannot redo a round exactly."""
    train, test = generate_text_nodes(seed=1, clients=6, min_samples=5, max_samples=40, dim=50,
                                      words_per_doc=6, topics=3)
    problem = SparseTextLogReg.from_nodes(train, test)
    algorithm = ALGORITHMS["cocoa_plus"](ALGORITHMS["cocoa_plus"].Hyper(name="cocoa_plus"))
    backend = RayBackend(problem, actors=2, cpus_per_actor=0.5)

    held = []

    def kill_at_round_2(row):
        if row["round"] == 2:
            # the duals are in actor 1's own store for this run (not in the shard's data)
            held.append(ray.get(backend.actors[1].holds_state.remote(backend.run)))
            os.kill(backend.stats()[1]["pid"], signal.SIGKILL)

    try:
        with pytest.raises(RuntimeError, match=r"actor 1 of the ray backend was restarted .* "
                                               r"lost the client state"):
            run_one(problem, algorithm, backend, rounds=6, eval_every=1, seed=0,
                    on_round=lambda rnd, rows, ended: [kill_at_round_2(r) for r in rows.values()])
    finally:
        backend.close()
    assert held == [True]


# --- a trial process killed; a trial failing numerically ------------------------------------

STEPS = list(range(0, 41, 5))


def faults_sweep(directory, **changes):
    sweep = {"name": "faults", "problem": {**LASSO, "name": "failing_lasso"},
             "algorithms": ["feddualavg"],
             "algorithm": {"clients_per_round": 4, "local_steps": 5, "client_lr": 0.001},
             "search": {"grid": {"problem.fail_at_eval": [0, 3]}},  # 3: LinAlgError at round 10
             "rounds": 40, "eval_every": 5, "report": False,
             "tune": {"metric": "f1", "mode": "max", "max_failures": 1},
             "tracking": {"uri": f"sqlite:///{directory / 'mlflow.db'}"}, **changes}
    path = directory / "faults.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


@pytest.mark.ray
def test_killed_trial_is_rerun_once_in_mlflow_and_a_linalg_failure_is_diverged(
        cluster, tmp_path, monkeypatch):
    """The trial with fail_at_eval=0 is SIGKILLed (its process, by the pid in its round-10
    result, which carries a checkpoint) and rerun by Tune from that checkpoint; the
    fail_at_eval=3 trial raises LinAlgError."""
    killed, reported = [], []  # reported: (pid, round, replayed) of the killed trial's results
    on_trial_result = MLflowLogger.on_trial_result

    def kill_once(self, iteration, trials, trial, result, **info):
        if trial.config["group"][0]["problem.fail_at_eval"] == 0:
            reported.append((result["pid"], result.get("round"), result.get("replayed", False)))
            if result.get("round") == 10 and not killed:
                os.kill(result["pid"], signal.SIGKILL)
                killed.append(result["pid"])
        return on_trial_result(self, iteration, trials, trial, result, **info)

    monkeypatch.setattr(MLflowLogger, "on_trial_result", kill_once)
    lines = []
    outcome = run_sweep(faults_sweep(tmp_path), storage=tmp_path / "state", echo=lines.append)
    assert killed and outcome.ok  # the sweep went on and ended well
    # the rerun first reports again the rows its checkpoint holds (round 5 or 10: the kill
    # may beat Tune registering the round-10 one), then computes only the rounds after it
    replayed = [rnd for pid, rnd, again in reported if pid != killed[0] and again]
    computed = [rnd for pid, rnd, again in reported if pid != killed[0] and not again]
    assert replayed[0] == 0 and replayed[-1] in (5, 10) and computed[0] == replayed[-1] + 5
    assert computed[-1] == 40

    store = Store(outcome.tracking_uri)
    parent = find_parent(store, outcome.experiment_id, "faults")
    runs = children(store, parent)
    trials = trials_frame(runs).set_index("problem.fail_at_eval")
    assert len(runs) == 2 and len(store.search(outcome.experiment_id, "")) == 3  # no extra run
    assert parent.info.status == "FINISHED"
    assert sum("rerun by Tune (1 of at most 1" in line for line in lines) == 1

    def history(fail_at_eval, metric="f1"):
        return store.client.get_metric_history(trials.loc[fail_at_eval, "run_id"], metric)

    def expected(fail_at_eval):
        return fco_ray.run({"problem": {**LASSO, "name": "failing_lasso", "fail_at_eval": fail_at_eval},
                            "algorithm": {"name": "feddualavg", "clients_per_round": 4,
                                          "local_steps": 5, "client_lr": 0.001},
                            "rounds": 40, "eval_every": 5, "seed": 0})

    # killed and rerun: every round exactly once, equal to an undisturbed run, ended once
    rerun = {r.data.tags["fco.trial_id"]: r for r in runs}[trials.loc[0, "trial_id"]]
    assert rerun.info.status == "FINISHED" and rerun.data.tags["fco.status"] == "finished"
    assert rerun.data.tags["fco.retries"] == "1" and rerun.data.tags["fco.final_round"] == "40"
    for metric in ("f1", "train_loss"):
        assert [m.step for m in history(0, metric)] == STEPS
        np.testing.assert_allclose([m.value for m in history(0, metric)], expected(0)[metric],
                                   rtol=1e-12)
    # LinAlgError at the third evaluation: diverged, the two finite rows kept, ranked last
    assert trials.loc[3, "status"] == "diverged" and trials.loc[3, "run_status"] == "FINISHED"
    diverged = expected(3)
    assert diverged.attrs["status"] == "diverged" and list(diverged["round"]) == [0, 5]
    assert [m.step for m in history(3)] == [0, 5]
    np.testing.assert_allclose([m.value for m in history(3)], diverged["f1"], rtol=1e-12)
    ranked = outcome.results.get_dataframe().sort_values("f1", ascending=False)
    assert list([g[0]["problem.fail_at_eval"] for g in ranked["config/group"]]) == [0, 3] and ranked["f1"].iloc[-1] == -np.inf
    assert "fco.best.feddualavg" in parent.data.tags


@pytest.mark.ray
def test_store_lost_mid_sweep_stops_it_and_resume_logs_every_round_once(cluster, tmp_path,
                                                                        monkeypatch):
    path = faults_sweep(tmp_path, problem=LASSO, search={"grid": {"algorithm.client_lr": [0.001, 0.002]}},
                        algorithm={"clients_per_round": 4, "local_steps": 5})
    writes, log_rows = [], Store.log_rows

    def store_goes_down(self, *args, **kwargs):
        writes.append(1)
        if len(writes) > 1:  # the first batch of rows is written, then the store is gone
            raise OSError("MLflow store unreachable (injected)")
        return log_rows(self, *args, **kwargs)

    monkeypatch.setattr(Store, "log_rows", store_goes_down)
    with pytest.raises(SweepInterrupted, match=r"stopped: the MLflow store sqlite:.* failed: OSError: MLflow store unreachable "
                                               r"\(injected\); .* fco-ray sweep .*faults.yaml --resume"):
        run_sweep(path, storage=tmp_path / "state", echo=lambda line: None)
    monkeypatch.setattr(Store, "log_rows", log_rows)  # the store is back
    outcome = run_sweep(path, resume=True, storage=tmp_path / "state", echo=lambda line: None)
    assert outcome.ok
    store = Store(outcome.tracking_uri)
    runs = children(store, find_parent(store, outcome.experiment_id, "faults"))
    assert len(runs) == 2 and len(store.search(outcome.experiment_id, "")) == 3
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["fco.status"] == "finished"
        assert [m.step for m in store.client.get_metric_history(run.info.run_id, "f1")] == STEPS


# --- an MLflow store that cannot be used: fail fast, before any work ---------------------

def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.mark.parametrize("store", ["server_down", "directory_is_a_file", "not_a_database"])
def test_unusable_tracking_store_fails_before_any_work(tmp_path, capsys, monkeypatch, store):
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "garbage.db").write_bytes(b"\x00 this is not an SQLite database " * 100)
    uri, named = {
        "server_down": (f"http://127.0.0.1:{closed_port()}", "is not reachable"),
        "directory_is_a_file": (f"sqlite:///{tmp_path / 'file' / 'mlflow.db'}", "cannot be opened"),
        "not_a_database": (f"sqlite:///{tmp_path / 'garbage.db'}", "cannot be opened"),
    }[store]
    monkeypatch.chdir(tmp_path)
    path = faults_sweep(tmp_path, problem=LASSO, search={}, tracking={"uri": uri})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        "problem": LASSO, "algorithm": {"name": "fedmid", "clients_per_round": 4},
        "rounds": 5, "tracking": {"uri": uri}}))
    ray_was_up = ray.is_initialized()
    for argv in (["sweep", str(path), "--storage", str(tmp_path / "state")], ["run", "run.yaml"]):
        start = time.monotonic()
        code = main(argv)
        err = capsys.readouterr().err
        assert time.monotonic() - start < 30  # MLflow alone would retry for minutes
        assert code == 1 and err.count("\n") == 1
        assert "TrackingUnavailable: MLflow tracking" in err and uri.split("///")[-1] in err and named in err
    assert not (tmp_path / "state").exists()  # Tune never started
    assert ray.is_initialized() == ray_was_up  # nor did Ray
    assert (tmp_path / "garbage.db").read_bytes().startswith(b"\x00 this is not")
