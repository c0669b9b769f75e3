"""A sweep killed mid-run and resumed: every trial once in MLflow, finished trials not rerun."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from fco_ray.tracking.queries import children, find_parent
from fco_ray.tracking.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS = list(range(0, 2001, 50))


def tune_trial(run) -> str:
    """The Tune trial of a child run (key `<trial>-<index>` for a fused trial's configuration)."""
    return run.data.tags["fco.trial_id"].rsplit("-", 1)[0]


def test_killed_sweep_resumes_each_trial_exactly_once(tmp_path):
    sweep = {"name": "rs", "algorithms": ["fedmid", "feddualavg"],
             "problem": {"name": "lasso", "clients": 16, "dim": 64, "support": 8,
                         "val_clients": 4, "samples_per_client": 32},
             "algorithm": {"clients_per_round": 4, "local_steps": 5},
             "search": {"grid": {"algorithm.client_lr": [0.001, 0.0003]}},
             "rounds": 2000, "eval_every": 50, "report": False,
             "tune": {"metric": "f1", "mode": "max", "max_concurrent": 1},
             "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    (tmp_path / "rs.yaml").write_text(yaml.safe_dump(sweep))
    cmd = [sys.executable, "-m", "fco_ray", "sweep", "rs.yaml", "--storage", str(tmp_path / "state")]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env["PYTHONUNBUFFERED"] = "1"
    driver = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in driver.stdout], daemon=True).start()
    store = Store(sweep["tracking"]["uri"])
    seen: list[str] = []  # the driver's output, for the message of a failure
    runs, running = [], []
    try:
        deadline = time.monotonic() + 240
        while not (seen and seen[-1].startswith("[1/4]")):
            try:
                seen.append(lines.get(timeout=max(1, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError("no '[1/4]' line in 240 s:\n" + "".join(seen[-40:])) from None
        # wait until the next trial has logged some rounds, then kill driver and its cluster
        # (the next Tune trial: a fused trial's configurations end one after the other, and
        # killing between them leaves a half-finished group, which is rerun as a whole)
        experiment = store.experiment_id("rs", create=False)
        while time.monotonic() < deadline:
            runs = children(store, find_parent(store, experiment, "rs"))
            ended = {tune_trial(r) for r in runs if r.info.status == "FINISHED"}
            running = [r for r in runs if r.info.status == "RUNNING" and tune_trial(r) not in ended]
            if running and store.last_step(running[0].info.run_id, "f1") >= 0:
                break
            time.sleep(0.5)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    before = {r.data.tags["fco.trial_id"]: r for r in runs}
    done_before = {t: r for t, r in before.items() if r.info.status == "FINISHED"}
    # some trials finished, at least one was interrupted
    assert done_before and running, ([(tune_trial(r), r.info.status) for r in runs], "".join(seen[-40:]))
    history_before = {t: store.client.get_metric_history(r.info.run_id, "f1") for t, r in done_before.items()}

    resumed = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # the trials still pending at the kill had no result files; Tune's analysis read them anyway
    # and warned "Failed to fetch metrics ... FileNotFoundError" (fco_ray/sweep/trial_files.py)
    assert "Failed to fetch metrics" not in resumed.stdout + resumed.stderr, resumed.stderr[-2000:]

    parent = find_parent(store, store.experiment_id("rs"), "rs")
    assert parent.info.status == "FINISHED" and "fco.best.fedmid" in parent.data.tags
    after = {r.data.tags["fco.trial_id"]: r for r in children(store, parent)}
    assert len(after) == 4 and len(store.search(store.experiment_id("rs"), "")) == 5  # no duplicates
    for trial_id, run in after.items():
        assert run.info.status == "FINISHED" and run.data.tags["fco.status"] == "finished"
        assert [m.step for m in store.client.get_metric_history(run.info.run_id, "f1")] == STEPS
        if trial_id in before:  # the interrupted trial continued its own run
            assert run.info.run_id == before[trial_id].info.run_id
    for trial_id, run in done_before.items():  # untouched: not rerun, not logged again
        assert after[trial_id].info.end_time == run.info.end_time
        assert store.client.get_metric_history(run.info.run_id, "f1") == history_before[trial_id]
        results = (tmp_path / "state" / "rs" / tune_trial(run) / "result.json").read_text().splitlines()
        assert len(results) <= len(STEPS) + 1 and json.loads(results[-1])["round"] == 2000
