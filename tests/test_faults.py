"""Faults injected on purpose, outcome asserted (README "Reliability"):

- a Ray client actor SIGKILLed mid-round is restarted and the round redone: same numbers;
- a Ray client actor that held client state (CoCoA+ duals) and is restarted: a clear error;
- a Tune trial process SIGKILLed mid-run is rerun from scratch by Tune: its MLflow child run
  holds every round exactly once and ends once;
- a trial whose evaluation raises LinAlgError ends `diverged` with its last finite metrics,
  ranks last, and the sweep carries on;
- an MLflow store that cannot be reached: the sweep / run fails fast, before any work.
"""
import os
import signal
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest
import yaml

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402

import fco_ray  # noqa: E402
from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.api import make_problem, resolve  # noqa: E402
from fco_ray.backends.ray_backend import RayBackend  # noqa: E402
from fco_ray.cli import main  # noqa: E402
from fco_ray.data.text_generator import generate_text_nodes  # noqa: E402
from fco_ray.engine import run_rounds  # noqa: E402
from fco_ray.problems.text import SparseTextLogReg  # noqa: E402
from fco_ray.tracking import Store, children, find_parent, trials_frame  # noqa: E402

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
        evaluate, calls = problem.evaluate, [0]

        def failing_evaluate(params):
            calls[0] += 1
            if calls[0] == p.fail_at_eval:
                raise np.linalg.LinAlgError("SVD did not converge")
            return evaluate(params)

        problem.evaluate = failing_evaluate
        return problem


register_failing_lasso()
# Ray workers cannot import this test module: ship its functions and classes by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             runtime_env={"worker_process_setup_hook": register_failing_lasso})
    yield
    ray.shutdown()


# --- a client actor killed mid-round -------------------------------------------------------

class HangOnce(ALGORITHMS["fedmid"]):
    """FedMiD whose first client call of round `at_round` writes its process id to `marker`
    and then hangs, so that the test can SIGKILL that actor in the middle of the round."""

    def __init__(self, hp, marker: str, at_round: int):
        super().__init__(hp)
        self.marker, self.at_round = marker, at_round

    def client_update(self, problem, payload, rows, key):
        if key.round == self.at_round:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass  # the redone call, on the restarted actor
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(300)  # killed long before
        return super().client_update(problem, payload, rows, key)


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
        calm = run_rounds(problem, HangOnce(cfg.algorithm, str(tmp_path / "never"), -1), backend, **run)
        marker, killed = str(tmp_path / "hung"), []
        killer = threading.Thread(target=kill_when_written, args=(marker, pids, killed))
        killer.start()
        hurt = run_rounds(problem, HangOnce(cfg.algorithm, marker, 7), backend, **run)
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

    def kill_at_round_2(row):
        if row["round"] == 2:
            os.kill(backend.stats()[1]["pid"], signal.SIGKILL)

    try:
        with pytest.raises(RuntimeError, match=r"actor 1 of the ray backend was restarted .* "
                                               r"lost the client state"):
            run_rounds(problem, algorithm, backend, rounds=6, eval_every=1, seed=0,
                       on_eval=kill_at_round_2)
    finally:
        backend.close()
