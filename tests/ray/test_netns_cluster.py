"""A Ray cluster whose nodes reach each other only over a network: docs/cluster.md, run.

Each node is a host of `tests/ray/netns.py` (a network namespace on a bridge, its own address,
home and /tmp/ray) started with the command blocks of docs/cluster.md (read from the file
after their markers, with this network's addresses: the page and the test cannot drift),
token authentication on. The head has no CPUs (it runs the sweep's driver only) and each
worker one, so a trial (1 CPU) and its client actor (1 CPU, placement spread) run on two
different workers and every actor call crosses the links. The sweep is submitted with
`ray job submit` from a fourth host (the user's machine), which also runs the MLflow
tracking server the page asks for.

- `test_sweep_across_namespaces`: the client actors run on the workers (Ray's state API),
  every row in MLflow equals the local backend's (relative 1e-12); while it runs, every
  listening socket of every node is on the node's address or loopback or is one of the
  listeners Ray binds to all interfaces (docs/cluster.md lists them), and from another
  host none of them answers without the token except the Prometheus endpoints.
- `test_worker_link_cut_mid_sweep`: mid-trial, the link of the worker holding the trial's
  client actor goes down (its packets dropped: the trial's calls to the actor hang, as with
  a pulled cable); once the head has declared that node dead the link comes back, the
  worker's raylet ends itself, and the worker is started again with the same command; the
  sweep goes on (or stops with its `--resume` command, which is then submitted): every
  configuration has every round once, equal to the local backend's, and the lost actor
  was restarted (or its trial rerun from its checkpoint).

The two tests share one cluster (`nodes`, started once for the module; the link cut comes
last). Root only (network namespaces); skips with the reason elsewhere. Every process the
tests start runs in one of the namespaces and is killed with it, also when a test fails.
"""
from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

import fco_ray
from tests.ray.netns import Host, Network, unavailable
from tests.ray.test_job_submit import copy_repository

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(fco_ray.__file__).resolve().parents[1]
DOC = REPO / "docs" / "cluster.md"
LASSO = {"name": "lasso", "clients": 16, "dim": 64, "support": 8, "val_clients": 4,
         "samples_per_client": 32}
ALGORITHM = {"clients_per_round": 4, "local_steps": 5}
RATES = [0.001, 0.0003]
#: what the page's submit line names, replaced here by this test's sweep, store and storage
DOC_SWEEP, DOC_TRACKING, DOC_STORAGE = ("sweeps/e1_lasso_ray.yaml", "http://MLFLOW_HOST:5000",
                                        "/shared/ray_results")
#: Ray's health checks of the nodes, faster than Ray 2.60's defaults (5 failed checks, 3 s
#: apart, each waiting up to 10 s: about a minute to declare a lost node dead), so that the
#: link-cut test waits ~15 s for it; 2 s to answer each, so that a loaded node is not taken
#: for a lost one (set in the head's environment, where the GCS reads them)
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                      "RAY_health_check_failure_threshold": "5",
                      "RAY_health_check_initial_delay_ms": "1000"}
QUIET = {"RAY_USAGE_STATS_ENABLED": "0"}  # no usage report (there is no route out anyway)


def doc_block(name: str) -> list[str]:
    """The commands of the bash block after `<!-- tests/ray/test_netns_cluster.py: NAME -->`."""
    text = DOC.read_text()
    marker = f"<!-- tests/ray/test_netns_cluster.py: {name} -->"
    assert marker in text, f"{DOC} lost the marker {marker}"
    block = re.search(r"```bash\n(.*?)```", text[text.index(marker):], re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def substitute(lines: list[str], **values: str) -> str:
    text = "\n".join(lines)
    for placeholder, value in values.items():
        assert placeholder in text, f"{placeholder} not in {lines}"
        text = text.replace(placeholder, value)
    return text


def with_cpus(lines: list[str], cpus: int) -> list[str]:
    """The block with `--num-cpus` added to its `ray start` line (the page leaves it out)."""
    return [f"{line} --num-cpus {cpus}" if line.startswith("ray start") else line for line in lines]


@dataclass
class Nodes:
    """The cluster both tests use, started once: the repository's copy the hosts run in,
    the head (no CPUs), two workers (1 CPU each) and the client (the user's machine, with
    the head's token)."""

    clone: Path
    head: Host
    w1: Host
    w2: Host
    client: Host


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """One network of this module's own (tests/ray/netns.py) with docs/cluster.md's cluster
    on it (three nodes and the client take ~40 s to start on 2 cores: once, not per test);
    everything left is killed and deleted here, also after a failure. The head's health
    checks are fast (FAST_HEALTH_CHECKS) for the link-cut test."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("netns")
    clone = root / "clone"
    clone.mkdir()
    copy_repository(clone)
    net = Network(root / "hosts")  # the nodes' Ray logs stay with the test's files
    try:
        with ray_head(net, clone, FAST_HEALTH_CHECKS) as head, \
                ray_worker(net, "w1", head, clone) as w1, \
                ray_worker(net, "w2", head, clone) as w2, \
                net.host("client", QUIET) as client:
            give_token(head, client)
            yield Nodes(clone, head, w1, w2, client)
    finally:
        net.close()


def give_token(head: Host, host: Host) -> None:
    """Copy the head's token to another host (what `scp` does between machines)."""
    host.token_file.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(head.token_file, host.token_file)
    host.token_file.chmod(0o600)


def start_node(host: Host, script: str, clone: Path) -> None:
    """Run a node's block; once more (after killing what it left) if `ray start` failed:
    it gives the new node 30 s to register with the GCS (`ray._private.node`, fixed), which
    a loaded 2-core machine running three nodes' start-up and a sweep has exceeded."""
    try:
        host.run(script, cwd=clone)
    except AssertionError as first:
        print(f"{host.name}: ray start failed, once more: {str(first)[-300:]}")
        host.kill()
        host.run(script, cwd=clone)


@contextlib.contextmanager
def ray_head(network: Network, clone: Path, env: dict | None = None):
    """The head node: docs/cluster.md's head block on a new host, no CPUs."""
    with network.host("head", {**QUIET, **(env or {})}) as head:
        start_node(head, substitute(with_cpus(doc_block("head"), 0), HEAD_IP=head.address), clone)
        assert head.token_file.is_file()
        yield head


def start_worker(head: Host, worker: Host, clone: Path) -> None:
    give_token(head, worker)
    start_node(worker, substitute(with_cpus(doc_block("worker"), 1), HEAD_IP=head.address,
                                  WORKER_IP=worker.address), clone)


@contextlib.contextmanager
def ray_worker(network: Network, name: str, head: Host, clone: Path):
    """A worker node: docs/cluster.md's worker block on a new host, 1 CPU."""
    with network.host(name, QUIET) as worker:
        start_worker(head, worker, clone)
        yield worker


def write_sweep(clone: Path, name: str, rounds: int, eval_every: int, **tune) -> str:
    sweep = {"name": name, "problem": LASSO, "algorithms": ["fedmid", "feddualavg"],
             "algorithm": ALGORITHM, "search": {"grid": {"algorithm.client_lr": RATES}},
             "seeds": [0], "rounds": rounds, "eval_every": eval_every, "report": False,
             "backend": {"name": "ray", "actors": 1, "cpus_per_actor": 1, "placement": "spread"},
             "tune": {"metric": "f1", "mode": "max", **tune}}
    path = f"sweeps/{name}.yaml"
    (clone / path).write_text(yaml.safe_dump(sweep))
    return path


def submit_script(head: Host, sweep: str, tracking_uri: str, storage: Path, *extra: str) -> str:
    lines = doc_block("submit")
    script = substitute(lines, HEAD_IP=head.address, **{DOC_SWEEP: sweep, DOC_TRACKING: tracking_uri,
                                                        DOC_STORAGE: str(storage)})
    return script + "".join(f" {e}" for e in extra)


def state_api(client: Host, head: Host, what: str, clone: Path) -> list[dict]:
    """`ray list <what>` through the head's dashboard, from the client (with the token)."""
    done = client.run(f"source .venv/bin/activate\nRAY_AUTH_MODE=token ray list {what} --address "
                      f"http://{head.address}:8265 --detail --format json --limit 10000", cwd=clone)
    return json.loads(done.stdout[done.stdout.index("["):])


def job_id(client: Host, head: Host, clone: Path, output: str) -> str:
    """The Ray job id of the job whose `ray job submit` printed `output`."""
    submission = re.search(r"Job '([\w-]+)' submitted successfully", output).group(1)
    jobs = state_api(client, head, "jobs", clone)
    return next(j["job_id"] for j in jobs if j.get("submission_id") == submission)


def expected_run(algorithm: str, lr: float, rounds: int, eval_every: int):
    """The same configuration on the local backend, in this process."""
    return fco_ray.run({"problem": LASSO, "algorithm": {"name": algorithm, **ALGORITHM, "client_lr": lr},
                        "rounds": rounds, "eval_every": eval_every, "seed": 0})


def assert_rows_equal_local(db: Path, sweep: str, rounds: int, eval_every: int) -> list:
    """Every configuration of the sweep: one FINISHED child run, every evaluated round once,
    each metric equal to the local backend's (relative 1e-12); no run twice."""
    from fco_ray.tracking.queries import children, find_parent
    from fco_ray.tracking.store import Store

    store = Store(f"sqlite:///{db}")
    experiment = store.experiment_id(sweep, create=False)
    parent = find_parent(store, experiment, sweep)
    runs = children(store, parent)
    assert parent.info.status == "FINISHED"
    assert len(store.search(experiment, "")) == 1 + 2 * len(RATES)  # no duplicate runs
    configs = sorted((r.data.params["algorithm.name"], float(r.data.params["algorithm.client_lr"]))
                     for r in runs)
    assert configs == sorted((a, lr) for a in ("fedmid", "feddualavg") for lr in RATES)
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["fco.status"] == "finished"
        expected = expected_run(run.data.params["algorithm.name"],
                                float(run.data.params["algorithm.client_lr"]), rounds, eval_every)
        assert list(expected["round"]) == list(range(0, rounds + 1, eval_every))
        for metric in ("f1", "train_loss", "val_loss", "density"):
            if metric not in expected:
                continue
            history = store.client.get_metric_history(run.info.run_id, metric)
            assert [m.step for m in history] == list(expected["round"]), metric  # each round once
            np.testing.assert_allclose([m.value for m in history], expected[metric], rtol=1e-12,
                                       atol=0, err_msg=metric)
    return runs


def test_sweep_across_namespaces(nodes, tmp_path):
    clone, head, w1, w2, client = nodes.clone, nodes.head, nodes.w1, nodes.w2, nodes.client
    rounds, every = 40, 10
    sweep = write_sweep(clone, "netns", rounds, every)
    db = clone / "mlflow.db"
    hosts = [head, w1, w2]
    # the MLflow tracking server of docs/cluster.md, on the client (the user's machine)
    mlflow = doc_mlflow_server(client, clone, db)
    try:
        submit = client.popen(submit_script(head, sweep, f"http://{client.address}:5000",
                                            clone / "ray_results"), cwd=clone, log=tmp_path / "submit.log")
        seen: dict[tuple, object] = {}  # every listening socket seen while the sweep runs
        while submit.poll() is None:
            for host in hosts:
                for s in host.listening():
                    seen[(host.name, s.host, s.port, s.process)] = (host, s)
            time.sleep(1.0)
        output = (tmp_path / "submit.log").read_text()
        assert submit.returncode == 0 and "succeeded" in output, output[-6000:]

        # placement: the sweep's driver ran on the head, the trials and their client actors
        # on the workers, never an actor beside its trial (every call crossed the links)
        assert {name for name, _, _, process in seen if process == "fco-ray"} == {"head"}
        nodes_by_id = {n["node_id"]: n["node_ip"] for n in state_api(client, head, "nodes", clone)}
        job = job_id(client, head, clone, output)  # the module's cluster runs both tests' jobs
        actors = [a for a in state_api(client, head, "actors", clone) if a["job_id"] == job]
        shards = [a for a in actors if a["class_name"] == "ShardWorker"]
        trials = {a["placement_group_id"]: nodes_by_id[a["node_id"]] for a in actors
                  if a["class_name"] == "ImplicitFunc"}  # Tune's trial actors
        assert shards and trials and set(trials.values()) <= {w1.address, w2.address}, actors
        for shard in shards:  # in its trial's placement group, on the other worker
            assert nodes_by_id[shard["node_id"]] in {w1.address, w2.address} - {trials[shard["placement_group_id"]]}

        # sockets: each node's own address or loopback, or one Ray binds to all interfaces
        (tmp_path / "sockets.txt").write_text("".join(f"{k}\n" for k in sorted(seen)))
        for (name, bound, port, process), (host, s) in sorted(seen.items()):
            assert bound in (host.address, "127.0.0.1") or everywhere(s), f"{name}: {s}"
        probe_without_token(client, head, [v for v in seen.values()], clone)
    finally:
        mlflow.terminate()
    assert_rows_equal_local(db, "netns", rounds, every)


def doc_mlflow_server(client: Host, clone: Path, db: Path):
    """docs/cluster.md's `mlflow server` line on the client, once it accepts connections."""
    line = next(line.strip() for line in DOC.read_text().splitlines() if line.strip().startswith("mlflow server"))
    line = line.replace("MLFLOW_HOST", client.address).replace("sqlite:///$PWD/mlflow.db", f"sqlite:///{db}")
    # one web worker and no job runner (fco-ray logs no GenAI jobs), as `fco-ray ui` starts it:
    # MLflow's defaults add seven processes importing MLflow beside the three nodes' start
    server = client.popen(f"source .venv/bin/activate\nexport MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false\n"
                          f"exec {line} --workers 1", cwd=clone,
                          log=clone.parent / "mlflow.log")
    client.run(f"for i in $(seq 240); do (exec 3<>/dev/tcp/{client.address}/5000) 2>/dev/null && exit 0; "
               "sleep 0.5; done; exit 1", timeout=150)
    return server


#: The listeners Ray 2.60 binds to every interface (0.0.0.0) on a node whose address is not
#: loopback, whatever its options (docs/cluster.md "What listens where"): process (as `ss`
#: names it) -> ports, with the ports docs/cluster.md's commands give them.
WORKER_PORTS = range(10002, 11000)  # --min-worker-port .. --max-worker-port
EVERYWHERE = {"gcs_server": {6379},  # GCS
              "raylet": {6380, 6381},  # node manager, object manager
              "ray::DashboardA": {6383, 6384},  # dashboard agent gRPC, metrics export
              "python3": {44217, 44227}}  # the head's autoscaler and dashboard metrics
PROMETHEUS = {6384, 44217, 44227}  # served to anyone who reaches them (no token)


def everywhere(s) -> bool:
    """Whether `s` is one of the listeners that Ray binds to all interfaces."""
    return s.host == "0.0.0.0" and (s.port in EVERYWHERE.get(s.process, ()) or s.port in WORKER_PORTS)


def probe(client: Host, clone: Path, targets: list[str], token: bool = False) -> dict:
    """tests/ray/netns_probe.py on the client: what each host:port answers (without the token,
    or with it)."""
    args = (f"--token {client.token_file} " if token else "") + " ".join(targets)
    done = client.run(f"source .venv/bin/activate\npython tests/ray/netns_probe.py {args}", cwd=clone,
                      timeout=600)
    return {r["target"]: r for r in map(json.loads, done.stdout.splitlines())}


def refuses(answer: dict) -> bool:
    """A port that refused every probe for want of the token: 401 to HTTP, or UNAUTHENTICATED
    from gRPC (with the other kinds' methods UNIMPLEMENTED there), never an answer."""
    http = list(answer["http"].values())
    codes = set(answer["grpc"].values())
    if http == [401, 401]:
        return "OK" not in codes
    return "UNAUTHENTICATED" in codes and codes <= {"UNAUTHENTICATED", "UNIMPLEMENTED"}


def probe_without_token(client: Host, head: Host, sockets: list, clone: Path) -> None:
    """From the client: every socket of every node that is reachable from another host
    refuses callers without the token, except Ray's Prometheus endpoints (and the
    dashboard's static start page); the same probe with the token gets answers (so the
    probe itself can see an open port)."""
    live = {(h.address, s.port) for h, s in sockets if s.host != "127.0.0.1" and s.pid in h.pids()}
    targets = sorted(f"{a}:{p}" for a, p in live)
    answers = probe(client, clone, targets)
    open_ports = {t: a for t, a in answers.items() if not refuses(a)}
    for target, answer in open_ports.items():
        port = int(target.rpartition(":")[2])
        if port in PROMETHEUS:
            assert answer["http"]["/"] == 200  # metrics, no code path
        else:
            assert target == f"{head.address}:8265" and answer["http"] == {"/": 200, "/api/version": 401}, answer
    assert {int(t.rpartition(":")[2]) for t in open_ports} <= PROMETHEUS | {8265}
    with_token = probe(client, clone, [f"{head.address}:6379", f"{head.address}:8265"], token=True)
    assert with_token[f"{head.address}:6379"]["grpc"]["/ray.rpc.NodeInfoGcsService/GetAllNodeInfo"] == "OK"
    assert with_token[f"{head.address}:8265"]["http"]["/api/version"] == 200


def running_rows(db: Path) -> int:
    """The most f1 rows of a RUNNING MLflow run (a trial under way), read from the SQLite
    file directly (its writer, the driver on the head, keeps it open)."""
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as con:
        try:
            rows = con.execute("SELECT COUNT(*) FROM metrics JOIN runs USING (run_uuid) WHERE "
                               "metrics.key = 'f1' AND runs.status = 'RUNNING' GROUP BY run_uuid").fetchall()
        except sqlite3.OperationalError:  # tables not made yet
            return 0
    return max((n for (n,) in rows), default=0)


def wait_for(what: str, condition, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_worker_link_cut_mid_sweep(nodes, tmp_path):
    clone, head, w1, w2, client = nodes.clone, nodes.head, nodes.w1, nodes.w2, nodes.client
    rounds, every = 1000, 50
    sweep = write_sweep(clone, "netcut", rounds, every, checkpoint_every=250, max_failures=3)
    db = clone / "netcut.db"  # a SQLite store: the driver runs on the head, which can write it
    # no client actor left from an earlier job on the module's cluster: the one seen is this sweep's
    wait_for("the earlier jobs' client actors to end",
             lambda: not any("ray::ShardWorke" in w.processes() for w in (w1, w2)), 120, 1.0)
    script = submit_script(head, sweep, f"sqlite:///{db}", clone / "ray_results")
    submit = client.popen(script, cwd=clone, log=tmp_path / "submit.log")
    # mid-trial, both workers busy: the trial on one, its client actor on the other,
    # which is the one cut (found by its process's name, `ray::ShardWorker`)
    log = tmp_path / "submit.log"

    def actor_under_way():
        assert submit.poll() is None, log.read_text()[-6000:]
        holders = [w for w in (w1, w2) if "ray::ShardWorke" in w.processes()]
        return holders[0] if len(holders) == 1 else None

    lost = wait_for("a trial under way with its client actor", actor_under_way, 300, 0.2)
    lost.cut()
    cut_at = time.monotonic()

    def declared_dead():
        nodes = state_api(client, head, "nodes", clone)
        return any(n["node_ip"] == lost.address and n["state"] == "DEAD" for n in nodes)

    wait_for("the head to declare the cut worker dead", declared_dead, 180, 2.0)
    dead_after = time.monotonic() - cut_at
    # the link back: the worker's raylet hears it was declared dead and ends itself
    # (docs/cluster.md: such a worker must be started again); then the worker again
    lost.restore()
    wait_for("the cut worker's raylet to end", lambda: "raylet" not in lost.processes(), 120, 1.0)
    lost.kill()  # what is left of its processes (workers, agents), if anything
    start_worker(head, lost, clone)
    submit.wait(timeout=900)
    output = log.read_text()
    jobs = {job_id(client, head, clone, output)}  # this test's, not the module's earlier ones
    if submit.returncode != 0:  # the sweep stopped: it must say how to finish it
        assert f"fco-ray sweep {sweep} --resume" in output, output[-6000:]
        resumed = client.run(script + " --resume", cwd=clone, timeout=900)
        jobs.add(job_id(client, head, clone, resumed.stdout + resumed.stderr))
    else:
        assert "succeeded" in output, output[-6000:]
    actors = [a for a in state_api(client, head, "actors", clone) if a["job_id"] in jobs]
    runs = assert_rows_equal_local(db, "netcut", rounds, every)
    # the client actor on the cut worker was lost and restarted by Ray on the worker back
    # (or, if the trial failed meanwhile, the trial was rerun by Tune from its checkpoint)
    retries = sum(int(r.data.tags.get("fco.retries", 0)) for r in runs)
    restarts = sum(int(a.get("num_restarts", 0)) for a in actors if a["class_name"] == "ShardWorker")
    assert retries + restarts >= 1, (retries, restarts)
    print(f"worker declared dead {dead_after:.1f} s after the cut; trial reruns {retries}, "
          f"actor restarts {restarts}; sweep {'went on' if submit.returncode == 0 else 'resumed'}")
