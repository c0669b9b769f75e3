"""Where the ray backend's fixed cost goes: starting Ray, the actors, the first round.

    .venv/bin/python benchmarks/ray_startup.py [--repeats 3] [--out benchmarks/results/ray_startup.md]
        [--quick]

Every measurement is a fresh Python process running E1 (64 clients x 128, d = 1024,
FedAvg, K = 10, batch 10, 10 clients per round) on the ray backend with 2 actors, timing:
  import     importing fco_ray and Ray
  ray        `ray.init` / `fco_ray.backends.cluster.connect` (starting or joining the cluster)
  backend    `RayBackend(...)` after that: placement group, shard data to the object
             store, actor creation (asynchronous: returns before the actors are up)
  round 1    the first round: waits for the actors (process, imports, shard fetch) and
             their first call (numba kernels loaded from the on-disk cache)
  steady     median of rounds 5..20
  close      `backend.close()` (ends the actors, and the cluster if it started it)
for these ways of getting a cluster and actors, interleaved (A, B, C, A, B, C, ...; `--modes`):
  default    a new local cluster with Ray's default options (`ray.init(address="local")`),
             what the backend did before fco_ray/backends/cluster.py (with address=None)
  fco_ray    a new local cluster through `fco_ray.backends.cluster.connect()` (loopback, no
             dashboard UI, no metrics collection, no worker logs to the driver, and
             neither the autoscaler monitor nor the log monitor: `cluster.LEAN`)
  fco_ray_full  the same with Ray's full set of node processes (`cluster.LEAN = False`:
             what `connect()` started before LEAN), for a side-by-side comparison
  connected_2nd  the second run of a process connected once (`fco_ray.backends.cluster.connect()`):
             the cluster is up, the second backend ships its shards and starts its actors
  reused_2nd the second run inside `fco_ray.backends.cluster.reuse()`: the second backend (on the
             problem built again) takes over the first one's parked actors
  joined     an existing cluster (started once with `ray start --head` on 127.0.0.1, workers
             at normal priority, as the README's "many runs" recipe does), joined by address
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).parent / "ray"
STEPS = ("import", "ray", "backend", "round 1", "steady", "close")

PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import ray
from fco_ray.api import resolve
from fco_ray.backends import cluster, make_backend
from fco_ray.core.plan import prepare
from fco_ray.ops.random import Key
out = {"import": time.perf_counter() - t0}
mode, address = sys.argv[1], sys.argv[2]
cfg = resolve({"problem": {"name": "lasso", "lam": 0.0}, "algorithm": {"name": "fedavg",
               "client_lr": 1e-3, "local_steps": 10, "batch_size": 10, "clients_per_round": 10}})
prepared = prepare([cfg])
problem, algorithm = prepared.problem, prepared.group()
RAY_BACKEND = {"name": "ray", "actors": 2}
def timed_run(backend_of, out):
    t = time.perf_counter()
    backend = backend_of()
    out["backend"] = time.perf_counter() - t
    state = algorithm.server_init(problem, problem.init_params(None))
    rounds = []
    for r in range(20):
        payload = algorithm.broadcast(state)
        ids = algorithm.select_clients(0, r, problem.num_clients)
        t = time.perf_counter()
        total, weight = backend.map_clients(algorithm, payload, ids, Key(0, r, ids))
        state = algorithm.server_update(problem, state, {k: v / weight for k, v in total.items()}, r)
        rounds.append(time.perf_counter() - t)
    out["round 1"], out["steady"] = rounds[0], float(np.median(rounds[4:]))
    return backend


t = time.perf_counter()
cluster.LEAN = mode != "fco_ray_full"
if mode == "default":
    ray.init(address="local")
elif mode == "reused_2nd":
    block = cluster.reuse()
    block.__enter__()
else:
    cluster.connect(address if mode == "joined" else None)
out["ray"] = time.perf_counter() - t
if mode.endswith("_2nd"):
    # a first run in this process (not timed here), then the timed second one on the same
    # problem built again, as a loop of runs or run_grid would
    timed_run(lambda: make_backend(RAY_BACKEND, problem), {}).close()
    problem = prepare([cfg]).problem
    out["ray"] = 0.0  # connected already
backend = timed_run(lambda: make_backend(RAY_BACKEND, problem), out)
out["reused"] = bool(getattr(backend, "reused", False))
t = time.perf_counter()
backend.close()
if mode == "reused_2nd":
    block.__exit__(None, None, None)
if ray.is_initialized():
    ray.shutdown()
out["close"] = time.perf_counter() - t
print("PROBE " + json.dumps(out))
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(mode: str, address: str, env: dict) -> dict:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, mode, address], env=env,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.split("PROBE ", 1)[1])
    out["process"] = time.perf_counter() - t
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--modes", default="fco_ray_full,fco_ray,connected_2nd,reused_2nd,joined")
    p.add_argument("--out", default=None, help="default benchmarks/results/ray_startup.md")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: one repeat of the mode fco_ray (a joined cluster: "
                        "tests/ray/test_cluster.py), the results in a temporary directory unless "
                        "--out names one")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.modes = 1, "fco_ray"
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "ray_startup.md")
    tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # private Ray temp dir (short paths)
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
           "PYTHONPATH": str(ROOT), "RAY_TMPDIR": tmp}
    port = free_port()
    joins = "joined" in args.modes.split(",")
    # the persistent cluster: loopback, no dashboard UI (what the README recipe starts)
    head = None if not joins else subprocess.Popen(
        [str(RAY), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats"],
        env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_worker_niceness": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    res = {"date": _dt.datetime.now().isoformat(timespec="seconds"),
           "command": "python benchmarks/ray_startup.py " + " ".join(sys.argv[1:]),
           "load_start": load(), "nproc": os.cpu_count(), "runs": []}
    try:
        deadline = time.monotonic() + 300
        while joins and not (Path(tmp) / "ray" / "ray_current_cluster").exists():
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("`ray start --head` did not come up")
            time.sleep(0.5)
        joined_env = {**env, "RAY_AUTH_MODE": "token"}  # `ray start` turns token auth on
        for rep in range(args.repeats):
            for mode in args.modes.split(","):
                out = probe(mode, address, joined_env if mode == "joined" else env)
                out.update(mode=mode, repeat=rep, load=load())
                res["runs"].append(out)
                print(json.dumps(out), flush=True)
    finally:
        if head is not None:
            head.terminate()
            try:
                head.wait(timeout=60)
            except subprocess.TimeoutExpired:
                head.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    res["load_end"] = load()
    out = Path(args.out)
    write_file(out.with_suffix(".json"), json.dumps(res, indent=1))
    write_file(out, markdown(res))
    print(f"wrote {out}")


def markdown(res: dict) -> str:
    L = [f"# Fixed cost of the ray backend, {res['date']}", "",
         f"Command: `{res['command']}`", "",
         f"{res['nproc']} CPUs; load average (1, 5, 15 min) {res['load_start']} at the start, "
         f"{res['load_end']} at the end; loads at each run: "
         + ", ".join(r["load"].split()[0] for r in res["runs"]) + ".", "",
         "E1 (64 x 128, d = 1024), FedAvg, 2 actors; seconds, median over repeats (min in "
         "brackets); each run a fresh process, the modes interleaved. For the `_2nd` modes the "
         "columns backend .. close are the second run's (`ray` = 0: connected already).", "",
         "| mode | " + " | ".join(STEPS) + " | to first result | whole process |",
         "|---|" + "---|" * (len(STEPS) + 2)]
    for mode in dict.fromkeys(r["mode"] for r in res["runs"]):
        runs = [r for r in res["runs"] if r["mode"] == mode]
        cells = []
        for step in (*STEPS, "first", "process"):
            v = [r["ray"] + r["backend"] + r["round 1"] if step == "first" else r[step]
                 for r in runs]
            cells.append(f"{np.median(v):.3f} ({min(v):.3f})")
        L.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
