"""End to end: `ray start --head`, `ray job submit ... fco-ray sweep`, results read from MLflow."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import fco_ray
from fco_ray.tracking import Store, children, find_parent

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(fco_ray.__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")
PROBLEM = {"name": "lasso", "clients": 16, "dim": 64, "support": 8, "val_clients": 4,
           "samples_per_client": 32}
ALGORITHM = {"clients_per_round": 4, "local_steps": 5, "client_lr": 0.001}


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def head():
    """A one-node cluster of our own: every port chosen free (other clusters may run here),
    stopped by ending its process group (`ray stop` would stop every cluster on the machine)."""
    gcs, dashboard, client, agent, agent_grpc, runtime_env, metrics = free_ports(7)
    temp = tempfile.mkdtemp(prefix="fr", dir="/tmp")  # short: unix socket paths are limited
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    log = open(Path(temp) / "start.log", "w")
    proc = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--num-cpus", "2",
         "--temp-dir", temp, "--ray-client-server-port", str(client),
         "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
         "--runtime-env-agent-port", str(runtime_env), "--metrics-export-port", str(metrics)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "will now block forever" not in (Path(temp) / "start.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (Path(temp) / "start.log").read_text()
            time.sleep(1)
        yield f"http://127.0.0.1:{dashboard}", env
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what SIGTERM left (gcs, monitor)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_sweep_submitted_as_a_ray_job_logs_to_mlflow(head, tmp_path):
    address, env = head
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # absolute: the job runs in a copy of the repo
    sweep = {"name": "job", "problem": PROBLEM, "algorithms": ["fedmid", "feddualavg"],
             "algorithm": ALGORITHM, "rounds": 20, "eval_every": 5, "report": False,
             "tune": {"metric": "f1", "mode": "max"}, "tracking": {"uri": uri}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(sweep))
    job_id = f"fco-test-{os.getpid()}"
    submit = subprocess.run(
        [RAY, "job", "submit", "--address", address, "--submission-id", job_id,
         "--working-dir", str(REPO), "--", sys.executable, "-m", "fco_ray", "sweep",
         str(tmp_path / "job.yaml"), "--storage", str(tmp_path / "state")],
        env=env, capture_output=True, text=True, timeout=300)
    status = subprocess.run([RAY, "job", "status", "--address", address, job_id],
                            env=env, capture_output=True, text=True, timeout=60)
    assert f"Job '{job_id}' succeeded" in status.stdout + status.stderr, status.stdout + status.stderr
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    assert "[2/2]" in submit.stdout

    store = Store(uri)
    parent = find_parent(store, store.experiment_id("job", create=False), "job")
    assert parent.info.status == "FINISHED"
    runs = children(store, parent)
    assert sorted(r.data.tags["fco.algorithm"] for r in runs) == ["feddualavg", "fedmid"]
    for run in runs:
        expected = fco_ray.run({"problem": PROBLEM, "rounds": 20, "eval_every": 5,
                                "algorithm": {"name": run.data.tags["fco.algorithm"], **ALGORITHM}})
        history = store.client.get_metric_history(run.info.run_id, "train_loss")
        assert [m.step for m in history] == [0, 5, 10, 15, 20]
        np.testing.assert_allclose([m.value for m in history], expected["train_loss"], rtol=1e-12)
