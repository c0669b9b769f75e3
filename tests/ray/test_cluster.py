"""Joining Ray: the named cluster or a new private loopback one, never another user's."""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fco_ray.backends.cluster import requested_address
from fco_ray.runtime.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"
FCO_RAY = Path(sys.executable).parent / "fco-ray"


def test_requested_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert requested_address() is None
    assert requested_address("local") is None
    assert requested_address(" 10.0.0.5:6379 ") == "10.0.0.5:6379"
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert requested_address() == "ray://head:10001"
    assert requested_address("127.0.0.1:7000") == "127.0.0.1:7000"  # the argument wins
    monkeypatch.setenv("RAY_ADDRESS", "")
    assert requested_address() is None
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(ConfigError, match="'auto'.*another user's"):
        requested_address()


def test_ray_backend_refuses_auto_before_starting_anything(monkeypatch, ray_down):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("this process is already connected to Ray (the address is not used then)")
    from fco_ray.api import resolve
    from fco_ray.backends import make_backend
    from fco_ray.core.plan import build as make_problem

    problem = make_problem(resolve({"problem": {"name": "lowrank", "clients": 3, "dim": 4,
                                                "rank": 1}, "algorithm": {"name": "fedmid"}}))
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with pytest.raises(ConfigError, match="RAY_ADDRESS"):
        make_backend({"name": "ray", "actors": 1}, problem)
    assert not ray.is_initialized()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_tmpdir():
    """A private Ray temp dir (RAY_TMPDIR): the clusters of these tests advertise themselves
    there, not in /tmp/ray where other users' bare `ray.init()` would find them. Short,
    because Ray's Unix socket paths under it must stay below 108 bytes."""
    path = tempfile.mkdtemp(prefix="fr", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _head(ray_tmpdir, *flags, **env_extra):
    """`ray start --head --block` with a private RAY_TMPDIR (it advertises itself in that
    dir's ray_current_cluster file, as `ray start` does); yields (address, env). Ended by
    signalling the blocking `ray start`, which takes its own processes down (no `ray stop`:
    that would end every Ray cluster of this user on the machine)."""
    pytest.importorskip("ray")
    port = _free_port()
    env = {**os.environ, "RAY_TMPDIR": ray_tmpdir}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
         "--include-dashboard=false", "--disable-usage-stats", *flags],
        env={**env, **env_extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address_file = Path(ray_tmpdir) / "ray" / "ray_current_cluster"
    deadline = time.monotonic() + 120
    while not address_file.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        if not address_file.is_file():
            pytest.fail(f"`ray start --head` did not come up (exit code {proc.poll()})")
        yield address_file.read_text().strip(), env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def unrelated_head():
    """Someone else's local cluster, on the machine's network address (Ray's default), in a
    private Ray temp dir of its own: one for the module (its tests join it and leave it)."""
    path = tempfile.mkdtemp(prefix="fr", dir="/tmp")
    try:
        with _head(path) as head:
            yield head
    finally:
        shutil.rmtree(path, ignore_errors=True)


_PROBE = r"""
import json, os, re, subprocess, sys
from pathlib import Path
import ray
from fco_ray.api import resolve
from fco_ray.core.plan import build as make_problem
from fco_ray.backends.ray_backend import RayBackend

out = {}
# what a bare ray.init() does here: it joins the cluster advertised on this machine
ray.init(log_to_driver=False)
out["bare_init_address"] = ray.get_runtime_context().gcs_address
ray.shutdown()

problem = make_problem(resolve({"problem": {"name": "lowrank", "clients": 3, "dim": 4, "rank": 1},
                                "algorithm": {"name": "fedmid"}}))
backend = RayBackend(problem, actors=1, cpus_per_actor=0.25)
out["backend_address"] = ray.get_runtime_context().gcs_address
stats = backend.stats()
out["clients"] = [s["clients"] for s in stats]
# the actors run at the driver's priority (Ray's default: 15 nice levels lower)
out["nice"] = [os.getpriority(os.PRIO_PROCESS, 0)] + [
    os.getpriority(os.PRIO_PROCESS, s["pid"]) for s in stats]
# every TCP port that a process of the cluster this process started listens on
parent = {}
for stat in Path("/proc").glob("[0-9]*/stat"):
    try:
        pid, rest = stat.read_text().split(") ", 1)
        parent[int(stat.parent.name)] = int(rest.split()[1])
    except (OSError, ValueError):
        pass
ours = {os.getpid()}
while True:  # this process and all its descendants
    more = {p for p, pp in parent.items() if pp in ours} - ours
    if not more:
        break
    ours |= more
try:
    ss = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
except (OSError, subprocess.SubprocessError) as e:
    ss = None
    out["ss_error"] = repr(e)
if ss is not None:
    out["listening"] = [line.split()[3] for line in ss.splitlines()
                        if {int(p) for p in re.findall(r"pid=(\d+)", line)} & ours]
backend.close()
out["initialized_after_close"] = ray.is_initialized()
print("PROBE " + json.dumps(out))
"""


@pytest.mark.ray
def test_backend_does_not_join_an_unrelated_local_cluster(unrelated_head):
    """With another cluster advertised on the machine and no address named, a bare
    `ray.init()` joins it; the ray backend starts its own cluster, on loopback only."""
    unrelated, env = unrelated_head
    env = {**env, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.split("PROBE ", 1)[1])
    assert probe["bare_init_address"] == unrelated  # the hazard is real on this machine
    assert probe["backend_address"] != unrelated
    assert probe["backend_address"].startswith("127.0.0.1:")
    assert probe["clients"] == [3] and probe["initialized_after_close"] is False
    assert probe["nice"][1:] == probe["nice"][:1]
    if "listening" not in probe or not probe["listening"]:
        pytest.skip(f"cannot see the cluster's listening sockets here (`ss -ltnp`: "
                    f"{probe.get('ss_error', 'no process ids shown')})")
    # GCS, raylet, agents, workers, metrics endpoints: all on loopback
    assert len(probe["listening"]) >= 4, probe["listening"]
    beyond = [a for a in probe["listening"]
              if not (a.startswith("127.0.0.1:") or a.startswith("[::ffff:127.0.0.1]:")
                      or a.startswith("[::1]:"))]
    assert beyond == [], probe["listening"]


_CONNECT = """
import sys, ray
from fco_ray.backends import cluster
for address in sys.argv[1:]:
    try:
        c = cluster.connect(address)
    except cluster.ClusterError as e:
        print("REFUSED", e)
        continue
    print("JOINED", c.initialized, c.started, ray.get_runtime_context().gcs_address)
    cluster.disconnect(c)
    print("LEFT", ray.is_initialized())
"""


@pytest.mark.ray
def test_named_address_is_joined_or_refused(unrelated_head):
    """A named cluster is joined (and left running, with a token if it asks for one); an
    address where no Ray runs, or a missing token, is a clear error naming the address,
    not a silently started local cluster."""
    unrelated, env = unrelated_head
    env = {**env, "PYTHONPATH": str(ROOT)}
    dead = f"127.0.0.1:{_free_port()}"
    env.pop("RAY_AUTH_MODE", None)
    done = subprocess.run([sys.executable, "-c", _CONNECT, unrelated, dead], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    refused = [line for line in done.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 2, done.stdout
    # `ray start --head` turns token auth on; joining it by address needs RAY_AUTH_MODE
    assert f"cluster at '{unrelated}'" in refused[0] and "RAY_AUTH_MODE=token" in refused[0]
    assert f"cluster at '{dead}'" in refused[1]

    done = subprocess.run([sys.executable, "-c", _CONNECT, unrelated],
                          env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [f"JOINED True False {unrelated}", "LEFT False"]


_NOISY_CLI = """
import sys
from fco_ray.problems import PROBLEMS, LassoParams, register_problem
from fco_ray.problems.linear import LinearRegression


class NoisyParams(LassoParams):
    name: str = "noisy_lasso"


class Noisy(LinearRegression):
    def grad(self, params, rows, key, batch_size):
        print("NOISE from a Ray worker", flush=True)  # runs where the client work runs
        return super().grad(params, rows, key, batch_size)


@register_problem("noisy_lasso", NoisyParams)
def build(params, seed):
    problem = PROBLEMS["lasso"].build(LassoParams(**{**params.model_dump(), "name": "lasso"}), seed)
    problem.__class__ = Noisy
    return problem


from fco_ray.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.ray
def test_run_stdout_is_only_the_metrics_table(ray_tmpdir, tmp_path):
    """`fco-ray run` on the ray backend, with client code that prints on the actors: stdout
    holds the metrics table and the status line only; what the workers printed stays in
    the session's log files (before fco_ray.backends.cluster, Ray forwarded it into stdout as
    "(ShardWorker pid=...) ..." lines, between the table's rows)."""
    pytest.importorskip("ray")
    (tmp_path / "noisy_cli.py").write_text(_NOISY_CLI)
    config = tmp_path / "run.yaml"
    config.write_text(
        "problem: {name: noisy_lasso, clients: 8, dim: 16, samples_per_client: 8, support: 4, "
        "val_clients: 2}\n"
        "algorithm: {name: fedavg, client_lr: 0.01, local_steps: 2, batch_size: 4, "
        "clients_per_round: 4}\n"
        "rounds: 40\neval_every: 20\n"
        "backend: {name: ray, actors: 2, cpus_per_actor: 0.5}\n")
    env = {**os.environ, "RAY_TMPDIR": ray_tmpdir, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(tmp_path / "noisy_cli.py"), "run", str(config),
                           "--no-mlflow"], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].split()[:2] == ["round", "train_loss"], done.stdout
    assert [line.split()[0] for line in lines[1:4]] == ["0", "20", "40"], done.stdout
    for line in lines[1:4]:
        [float(x) for x in line.split()]  # table rows: numbers only
    assert lines[4:] == ["status: finished"], done.stdout
    # the workers did print: into the session's log files, not into this run's stdout
    logs = list(Path(ray_tmpdir).glob("ray/session_*/logs/worker-*.out"))
    assert any("NOISE from a Ray worker" in p.read_text() for p in logs)


@pytest.mark.ray
def test_joins_a_cluster_on_loopback(ray_tmpdir):
    """The README's one-cluster-for-many-runs recipe: a head on 127.0.0.1, joined by
    address (the driver must take node IP 127.0.0.1 too, else Ray waits for a raylet at
    the machine's network address), and its actors run the backend's work."""
    code = _CONNECT.replace("cluster.disconnect(c)", "from fco_ray.api import resolve\n"
                            "    from fco_ray.core.plan import build as make_problem\n"
                            "    from fco_ray.backends.ray_backend import RayBackend\n"
                            "    p = make_problem(resolve({'problem': {'name': 'lowrank', 'clients': 3, "
                            "'dim': 4, 'rank': 1}, 'algorithm': {'name': 'fedmid'}}))\n"
                            "    b = RayBackend(p, actors=1, cpus_per_actor=0.25)\n"
                            "    print('CLIENTS', [s['clients'] for s in b.stats()])\n"
                            "    b.close()\n"
                            "    cluster.disconnect(c)")
    with _head(ray_tmpdir, "--node-ip-address=127.0.0.1",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0") as (address, env):
        assert address.startswith("127.0.0.1:")
        env = {**env, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "token"}
        done = subprocess.run([sys.executable, "-c", code, address], env=env,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [f"JOINED True False {address}", "CLIENTS [3]",
                                        "LEFT False"], done.stdout


_LEAN = """
import json, ray
from ray._private import parameter
from fco_ray.backends import cluster
from ray._private import utils
import psutil
before = parameter.RayParams.__init__, utils.get_dashboard_dependency_error
c = cluster.connect(num_cpus=1)
@ray.remote
def square(x):
    return x * x
processes = ray._private.worker._global_node.all_processes
# the API server's command line, and the agent's as the raylet was given it (the agent
# renames its own process)
commands = {"dashboard": psutil.Process(processes["dashboard"][0].process.pid).cmdline()}
for arg in psutil.Process(processes["raylet"][0].process.pid).cmdline():
    if arg.startswith("--dashboard_agent_command="):
        commands["dashboard_agent"] = arg.split()
out = {"kinds": sorted(processes), "started": c.started,
       "minimal": sorted(k for k, cmd in commands.items() if "--minimal" in cmd),
       "restored": (parameter.RayParams.__init__, utils.get_dashboard_dependency_error) == before,
       "square": ray.get(square.remote(7))}
cluster.disconnect(c)
print("PROBE " + json.dumps(out))
"""


@pytest.mark.ray
def test_new_local_cluster_leaves_out_the_monitors(ray_tmpdir):
    """A private cluster starts without the autoscaler monitor and the log monitor, with
    Ray's minimal API server and agent (cluster.LEAN), runs tasks, and leaves Ray's
    functions as they were."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), RAY_TMPDIR=ray_tmpdir)
    done = subprocess.run([sys.executable, "-c", _LEAN], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.split("PROBE ", 1)[1])
    assert probe["started"] and probe["restored"] and probe["square"] == 49
    assert {"gcs_server", "raylet"} <= set(probe["kinds"]), probe["kinds"]
    assert not {"monitor", "log_monitor"} & set(probe["kinds"]), probe["kinds"]
    # Ray's minimal API server and dashboard agent (no HTTP / gRPC servers)
    assert probe["minimal"] == ["dashboard", "dashboard_agent"], probe["minimal"]
