"""When Ray actors pay for themselves: seconds per round, local backend vs 1 and 2 actors.

    .venv/bin/python benchmarks/ray_scaling.py [--cycles 10] [--quick]
        [--out benchmarks/results/ray_scaling.md]

Workloads (client work per round = clients per round x local steps x cost of a step):
  mlp      E4's 200-200 MLP on digits (20 clients), FedMiD (an l1-ball projection of each
           weight matrix per local step), batch 10; (clients per round, K) = (10, 10),
           (20, 10), (20, 40)
  lasso    E1's lasso at 1,000 clients x 32 (d = 1024), FedMiD, batch 10; (clients per
           round, K) = (100, 10), (1000, 50)
Each (workload, threads) pair runs in its own process, with one local Ray cluster of 2 CPUs
(fco_ray.backends.cluster.connect(num_cpus=2)). The local backend and the ray backend with 1 and with
2 actors are alive at once; each cycle runs one round (client work + server update) on each,
from the same server state, so the three times of a cycle are side by side under the same
background load; 2 warm-up cycles are not counted. Speedup = local time / ray time per
cycle, summarized by its median over the cycles.

Threads: NumPy's BLAS may run a matrix product on both cores, so the local backend can
already use 2 cores where the actors (Ray gives an actor of 1 CPU one BLAS thread) use one
each. Both settings are measured: `pinned` (OMP/OpenBLAS/MKL threads = 1 in the driver too:
one core per process, the fair test of the actors' parallelism) and `default` (whatever the
libraries choose, what a user gets).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
WORKLOADS = {
    "mlp": {"problem": {"name": "mlp"}, "algorithm": "fedmid", "client_lr": 0.1,
            "grid": [(10, 10), (20, 10), (20, 40)]},
    "lasso": {"problem": {"name": "lasso", "clients": 1000, "samples_per_client": 32},
              "algorithm": "fedmid", "client_lr": 1e-3,
              "grid": [(100, 10), (1000, 50)]},
}
WARMUP = 2


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------------------------
# one (workload, threads) configuration, in its own process
# ---------------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """CPU time of all threads of process `pid` so far (nanosecond schedstat counters)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def worker(workload: str, cycles: int, quick: bool) -> list[dict]:
    """Per grid point: the three backends alive at once; each cycle runs one round on each
    (local, 1 actor, 2 actors) from the same server state, so the three times of a cycle
    see the same background load. Actors reserve 0.5 CPU each so that all three fit on the
    2-CPU cluster; only the backend running a round uses the cores."""
    import numpy as np

    from fco_ray.api import resolve
    from fco_ray.backends import cluster, make_backend
    from fco_ray.core.plan import prepare
    from fco_ray.ops.random import Key

    spec = WORKLOADS[workload]
    grid = spec["grid"][:1] if quick else spec["grid"]
    connection = cluster.connect(num_cpus=2)
    rows = []
    try:
        problem = None
        for per_round, steps in grid:
            cfg = resolve({"problem": spec["problem"], "seed": 0, "algorithm": {
                "name": spec["algorithm"], "client_lr": spec["client_lr"], "local_steps": steps,
                "batch_size": 10, "clients_per_round": per_round}})
            prepared = prepare([cfg], problem)  # the workload's problem, built once
            problem, algorithm = prepared.problem, prepared.group()
            backends = {"local": make_backend({"name": "local"}, problem),
                        "ray1": make_backend({"name": "ray", "actors": 1, "cpus_per_actor": 0.5}, problem),
                        "ray2": make_backend({"name": "ray", "actors": 2, "cpus_per_actor": 0.5}, problem)}
            times = {k: [] for k in backends}
            cpu = {k: [] for k in backends}  # CPU seconds on the round's critical path
            split = {k: [] for k in backends}  # (driver CPU, [each actor's CPU]) per round
            pids = {k: [st["pid"] for st in b.stats()] for k, b in backends.items()
                    if k != "local"}
            state = algorithm.server_init(problem, problem.init_params(np.random.default_rng(0)))
            try:
                for rnd in range(WARMUP + cycles):
                    payload = algorithm.broadcast(state)
                    ids = algorithm.select_clients(0, rnd, problem.num_clients)
                    for name, backend in backends.items():
                        actors0 = [cpu_seconds(pid) for pid in pids.get(name, [])]
                        c = time.process_time()
                        t = time.perf_counter()
                        total, weight = backend.map_clients(algorithm, payload, ids,
                                                            Key(0, rnd, ids))
                        new = algorithm.server_update(
                            problem, state, {k: v / weight for k, v in total.items()}, rnd)
                        if rnd >= WARMUP:
                            times[name].append(time.perf_counter() - t)
                            actors = [cpu_seconds(pid) - a0
                                      for pid, a0 in zip(pids.get(name, []), actors0)]
                            # the driver, plus the busiest actor (the others run beside it)
                            cpu[name].append(time.process_time() - c + max(actors, default=0.0))
                            split[name].append((time.process_time() - c, actors))
                    state = new  # every backend computed the same round; go on from the last
            finally:
                for backend in backends.values():
                    backend.close()
            row = {"workload": workload, "clients_per_round": per_round, "local_steps": steps,
                   "load": load(), **times, "cpu": cpu, "cpu_split": split}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        cluster.disconnect(connection)
    return rows


# ---------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=10, help="timed rounds per backend")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: the first grid point of lasso, default threads, 2 cycles, "
                        "the results in a temporary directory unless --out names one")
    p.add_argument("--workloads", default="mlp,lasso")
    p.add_argument("--threads", default="pinned,default")
    p.add_argument("--out", default=None, help="default benchmarks/results/ray_scaling.md")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick and not args.worker:
        args.cycles, args.workloads, args.threads = 2, "lasso", "default"
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "ray_scaling.md")
    if args.worker:
        print("ROWS " + json.dumps(worker(args.worker, args.cycles, args.quick)), flush=True)
        return
    res = {"date": _dt.datetime.now().isoformat(timespec="seconds"),
           "command": "python benchmarks/ray_scaling.py " + " ".join(sys.argv[1:]),
           "load_start": load(), "nproc": os.cpu_count(), "rows": []}
    for threads in args.threads.split(","):
        env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "RAY_ADDRESS"}
        if threads == "pinned":
            env.update({k: "1" for k in THREAD_VARS})
        for workload in args.workloads.split(","):
            cmd = [sys.executable, __file__, "--worker", workload, "--cycles", str(args.cycles)]
            cmd += ["--quick"] if args.quick else []
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{workload}/{threads} failed:\n{done.stderr[-4000:]}")
            rows = json.loads(done.stdout.split("ROWS ", 1)[1])
            for row in rows:
                row["threads"] = threads
                print(json.dumps(row), flush=True)
            res["rows"] += rows
    res["load_end"] = load()
    out = Path(args.out)
    write_file(out.with_suffix(".json"), json.dumps(res, indent=1))
    write_file(out, markdown(res))
    print(f"wrote {out}")


def split_cell(row: dict) -> str:
    """Median driver CPU and median CPU of each actor, 2 actors, per round."""
    split = row.get("cpu_split", {}).get("ray2")
    if not split:
        return ""
    driver = np.median([d for d, _ in split])
    actors = np.median([a for _, a in split], axis=0)
    return f"{driver:.3f} / " + ", ".join(f"{a:.3f}" for a in actors)


def markdown(res: dict) -> str:
    L = [f"# Ray actors vs the local backend, {res['date']}", "",
         f"Command: `{res['command']}`", "",
         f"{res['nproc']} CPUs; load average (1, 5, 15 min) {res['load_start']} at the start, "
         f"{res['load_end']} at the end. Other processes share the machine: compare the "
         "columns of a row (measured in alternation, round by round), not rows.", "",
         "Seconds per round (client work + server update), median over the cycles (min in "
         "brackets); speedup = local / ray per cycle, median (and quartiles) over the cycles. "
         "`pinned`: one BLAS thread in every process; `default`: the libraries' choice (the "
         "driver's NumPy may use both cores, an actor uses one).", "",
         "CPU columns: CPU seconds on a round's critical path (local: the driver process; "
         "ray: the driver plus the busiest actor, from the actors' /proc schedstat "
         "counters), medians; `CPU speedup` = local CPU / ray CPU per cycle, median: the "
         "speedup the round would have if every process had a core of its own. On this "
         "shared machine the kernel schedules by session (autogroup): all processes of one "
         "benchmark share one group's slice of the 2 cores, under ~1 core whenever more "
         "than a few other sessions are busy, and then a second actor cannot make a round "
         "faster in wall time.", "",
         "| threads | workload | clients/round | K | local s | 1 actor s | 2 actors s | speedup 1 actor | speedup 2 actors (quartiles) | CPU s: local / 1 / 2 actors | CPU speedup 2 actors | 2 actors: driver CPU s / each actor's CPU s | load |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        loc, r1, r2 = (float(np.median(r[k])) for k in ("local", "ray1", "ray2"))
        s1 = np.asarray(r["local"]) / np.asarray(r["ray1"])
        s2 = np.asarray(r["local"]) / np.asarray(r["ray2"])
        q1, q3 = np.percentile(s2, [25, 75])
        L.append(f"| {r['threads']} | {r['workload']} | {r['clients_per_round']} | "
                 f"{r['local_steps']} | {loc:.4f} ({min(r['local']):.4f}) | {r1:.4f} "
                 f"({min(r['ray1']):.4f}) | {r2:.4f} ({min(r['ray2']):.4f}) | "
                 f"{np.median(s1):.2f}x | {np.median(s2):.2f}x ({q1:.2f}-{q3:.2f}) | "
                 + " / ".join(f"{np.median(r['cpu'][k]):.3f}" for k in ("local", "ray1", "ray2"))
                 + f" | {np.median(np.asarray(r['cpu']['local']) / np.asarray(r['cpu']['ray2'])):.2f}x"
                 f" | {split_cell(r)} | {r['load'].split()[0]} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
