"""Performance harness of fco_ray: one command, results written to benchmarks/results/.

    .venv/bin/python benchmarks/run.py [--quick] [--only local,scaling,ray,sweep,grid] [--out FILE]

Sections (see benchmarks/README.md for what each number means):
  local    E1 / E2 at paper scale: engine rounds/s next to a plain per-client Python loop of
           the same algorithm (run in the same process, interleaved), and as a fraction of
           the memory-bandwidth roofline (bytes a round must touch / measured copy bandwidth).
  scaling  cost of a round vs clients per round (10 .. 10,000), dimension and local steps K.
  ray      Ray backend: per-round overhead over the local backend, 1/2/4 actors on this
           machine and on a simulated multi-node cluster (ray.cluster_utils.Cluster).
  sweep    trials per minute of a reduced E1 grid through the sweep runner (Ray Tune +
           MLflow), Tune/MLflow overhead per reported round, and an extrapolation of the full
           E1 grid's wall time.
  grid     the full E1 grid (420 trials x 2000 rounds) run end to end with `fco-ray sweep`,
           measured (~9 min; only with --only grid).

Every timing is the median of several repeats; comparisons are interleaved (A, B, A, B, ...)
so that both sides see the same background load. Nothing here is a test: no timing is
asserted, the targets are only compared and reported.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from fco_ray import ALGORITHMS  # noqa: E402
from fco_ray.api import resolve  # noqa: E402
from fco_ray.backends import make_backend  # noqa: E402
from fco_ray.core.engine import run_rounds  # noqa: E402
from fco_ray.core.group import INIT_TAG  # noqa: E402
from fco_ray.core.group import evaluate_one, make_group  # noqa: E402
from fco_ray.core.plan import build as build_problem  # noqa: E402
from fco_ray.ops.random import Key, generator, sample_clients  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

E1_ALGORITHMS = ["fedmid", "fedmid_osp", "feddualavg", "feddualavg_osp"]
# stable rates (tests/engine/test_claims.py); a diverged run stops early and is refused below
E1_RATES = {"client_lr": 1e-3, "server_lr": 1.0}
E2_RATES = {"client_lr": 1e-3, "server_lr": 5.0}
GiB = 2**30


# ---------------------------------------------------------------------------------------
# machine and memory bandwidth
# ---------------------------------------------------------------------------------------
def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_info() -> dict:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    caches = []
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            caches.append(f"L{(idx / 'level').read_text().strip()}"
                          f"{(idx / 'type').read_text().strip()[0].lower()} {(idx / 'size').read_text().strip()}")
        except OSError:
            pass
    info = {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "caches": ", ".join(caches),
        "memory_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": _blas_name(),
        "platform": platform.platform(),
    }
    try:
        import ray

        info["ray"] = ray.__version__
    except ImportError:
        pass
    try:
        info["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def _blas_name() -> str:
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # numpy < 2 or an unusual build: not essential
        return "unknown"


def copy_bandwidth(repeats: int, nbytes: int = GiB // 2) -> dict:
    """Memory bandwidth from np.copyto between two large arrays (far beyond the caches).

    `stream_gbs` counts every byte twice (read once, written once), the STREAM "copy"
    convention: it is the rate at which the memory system moves bytes, from the best of the
    repeats as STREAM reports it. The roofline uses it.
    """
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    np.copyto(b, a)  # fault in the pages
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - t)
    t = min(times)
    return {"array_gib": nbytes / GiB, "copy_s": t, "stream_gbs": 2 * nbytes / t / 1e9,
            "array_gbs": nbytes / t / 1e9, "median_stream_gbs": 2 * nbytes / median(times) / 1e9}


def rescale_roofline(res: dict, start: dict, end: dict) -> None:
    """The bandwidth of a shared machine varies (other tenants, a sweep's processes winding
    down): the roofline uses the higher of the start and end measurements (the faster the
    memory, the smaller the fraction of it a round achieves)."""
    factor = start["stream_gbs"] / end["stream_gbs"]
    if factor >= 1:
        return
    res["bandwidth"] = {**end, "measured": "at the end (higher than at the start)"}
    rows = list(res.get("local", []))
    for part in res.get("scaling", {}).values():
        rows += part["rows"]
    for row in rows:
        for key in ("roofline_ms", "roofline_frac", "roofline_frac_cpu"):
            if key in row:
                row[key] *= factor


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def build(name: str, **params):
    """Problem `name` with these parameters (the rest at their defaults), seed 0, built as
    every run builds it (`fco_ray.core.plan.build` of a validated configuration)."""
    return build_problem(resolve({"problem": {"name": name, **params},
                                  "algorithm": {"name": "feddualavg"}, "seed": 0}))


def LocalBackend(problem, **options):  # noqa: N802  (the backend a run config names)
    return make_backend({"name": "local", **options}, problem)


def make_algorithm(name: str, **hp):
    cls = ALGORITHMS[name]
    return cls(cls.Hyper(name=name, **hp))


def round_bytes(problem, hp) -> int:
    """Bytes a round must touch at least: the sampled minibatch rows (features and label,
    K * C * B rows) plus one read of the broadcast and one write of the message per client."""
    row = sum(int(np.prod(v.shape[2:], dtype=np.int64)) for v in problem.train.arrays.values())
    params = sum(int(np.prod(s, dtype=np.int64)) for s in problem.shapes.values())
    c = hp.clients_per_round or problem.num_clients
    return 8 * (hp.local_steps * c * hp.batch_size * row + 2 * c * params)


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


CPU_TIMES: dict = {}  # label -> median CPU seconds of the last `interleaved` call with it


def interleaved(fns: dict, repeats: int) -> dict:
    """Median wall seconds of each function, called in turns (a, b, a, b, ...) after a
    warm-up. The median CPU seconds of this process (all threads) go to CPU_TIMES: under
    background load they show how much of the wall time was waiting for a core."""
    for fn in fns.values():
        fn()
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            c = time.process_time()
            wall[k].append(timed(fn))
            cpu[k].append(time.process_time() - c)
    CPU_TIMES.update({k: median(v) for k, v in cpu.items()})
    return {k: median(v) for k, v in wall.items()}


def run_engine(problem, algorithm, backend, rounds: int):
    """`rounds` rounds of the engine, evaluated only at round 0 and at the end. A diverged
    run stops early and would look fast: refuse it (the rates below are stable ones)."""
    (result,) = run_rounds(problem, make_group([algorithm]), backend, rounds=rounds,
                           eval_every=rounds, seed=0)
    if result.status != "finished":
        raise RuntimeError(f"{algorithm.name} on {problem.name} diverged; pick a smaller client_lr")
    return result


def engine_round_time(problem, algorithm, rounds: int, repeats: int, backend=None) -> float:
    """Seconds per training round of `run_rounds` (the evaluations at round 0 and at the end
    are timed separately and subtracted)."""
    backend = backend or LocalBackend(problem)
    t = interleaved({
        "run": lambda: run_engine(problem, algorithm, backend, rounds),
        "eval": lambda: engine_eval(problem, algorithm),
    }, repeats)
    CPU_TIMES["round"] = (CPU_TIMES["run"] - 2 * CPU_TIMES["eval"]) / rounds
    return (t["run"] - 2 * t["eval"]) / rounds


def engine_eval(problem, algorithm) -> None:
    state = algorithm.server_init(problem, problem.init_params(generator(0, INIT_TAG)))
    evaluate_one(problem, algorithm, state)


# ---------------------------------------------------------------------------------------
# the straightforward per-client loop (the baseline the engine must beat)
# ---------------------------------------------------------------------------------------
def naive_feddualavg(problem, hp, rounds: int, seed: int = 0, rng_kind: str = "key"):
    """FedDualAvg on a linear-regression problem, written the plain way: a Python loop over
    the round's clients, each running its K local steps with NumPy on its own data.

    Per client m and step k:  w = prox_{(etat + lr k) psi}(z);  sample B rows of X_m;
    r = X_b w + b - y_b;  z_w -= lr X_b^T r / B;  z_b -= lr mean(r).
    Server: z += eta_s mean_m (z^m_K - z);  etat += eta_s lr K.

    rng_kind "key": minibatch indices from the same counter-based keys as the engine (the
    result then equals the engine's to rounding, which the benchmark checks); "numpy": one
    `np.random.default_rng((seed, round, client))` per client and round (the cheapest
    straightforward choice; same distribution, other numbers).
    """
    x_all, y_all, sizes = problem.train.arrays["x"], problem.train.arrays["y"], problem.train.sizes
    shape = problem.shapes["w"]
    lam = problem.psi.regs["w"].lam
    lr, lr_s, steps, batch = hp.client_lr, hp.server_lr, hp.local_steps, hp.batch_size
    z_w = np.zeros(int(np.prod(shape)))
    z_b = 0.0
    etat = 0.0

    def prox(v, t):
        if len(shape) == 1:  # soft threshold, in its cheapest NumPy form
            return v - np.clip(v, -t * lam, t * lam)
        u, s, vh = np.linalg.svd(v.reshape(shape), full_matrices=False)
        return ((u * np.maximum(s - t * lam, 0.0)) @ vh).reshape(-1)

    for rnd in range(rounds):
        ids = sample_clients(seed, rnd, problem.num_clients, hp.clients_per_round)
        sum_w = np.zeros_like(z_w)
        sum_b = 0.0
        for cid in ids:
            n = int(sizes[cid])
            xm = x_all[cid, :n].reshape(n, -1)
            ym = y_all[cid, :n]
            zw, zb = z_w.copy(), z_b
            rng = np.random.default_rng((seed, rnd, int(cid))) if rng_kind == "numpy" else None
            for k in range(steps):
                w = prox(zw, etat + lr * k)
                if rng is None:
                    idx = Key(seed, rnd, np.array([cid]), k).integers(np.array([n]), batch)[0]
                else:
                    idx = rng.integers(0, n, size=batch)
                xb = xm[idx]
                r = xb @ w + zb - ym[idx]
                zw -= lr * (xb.T @ r) / batch
                zb -= lr * r.sum() / batch
            sum_w += zw - z_w
            sum_b += zb - z_b
        z_w = z_w + lr_s * sum_w / len(ids)
        z_b = z_b + lr_s * sum_b / len(ids)
        etat += lr_s * lr * steps
    return {"w": prox(z_w, etat).reshape(shape), "b": np.asarray(z_b)}


def check_naive_matches_engine(problem, hp, rounds: int = 5) -> float:
    """Max |difference| of the output model after `rounds` rounds: naive loop vs engine."""
    algorithm = make_algorithm("feddualavg", **hp.model_dump(exclude={"name"}))
    result = run_engine(problem, algorithm, LocalBackend(problem), rounds)
    ours = algorithm.output(problem, result.state)
    ref = naive_feddualavg(problem, hp, rounds)
    return max(float(np.max(np.abs(ours[k] - ref[k]))) for k in ours)


# ---------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------
def section_local(out: dict, bw: dict, quick: bool, repeats: int) -> None:
    rows = []
    for pname, rates in (("lasso", E1_RATES), ("lowrank", E2_RATES)):
        problem = build(pname)
        algorithm = make_algorithm("feddualavg", **rates)
        hp = algorithm.hp
        backend = LocalBackend(problem)
        one_by_one = LocalBackend(problem, chunk_size=1)  # the engine's code, one client at a time
        n_engine = 10 if quick else 300  # --quick: a smoke run (the code paths, seconds)
        n_naive = 4 if quick else 60
        t = interleaved({
            "engine": lambda: run_engine(problem, algorithm, backend, n_engine),
            "eval": lambda: engine_eval(problem, algorithm),
            "naive_key": lambda: naive_feddualavg(problem, hp, n_naive, rng_kind="key"),
            "naive_numpy": lambda: naive_feddualavg(problem, hp, n_naive, rng_kind="numpy"),
            "chunk1": lambda: run_engine(problem, algorithm, one_by_one, n_naive),
        }, repeats)
        cpu = dict(CPU_TIMES)
        engine = (t["engine"] - 2 * t["eval"]) / n_engine
        engine_cpu = (cpu["engine"] - 2 * cpu["eval"]) / n_engine
        naive_key = t["naive_key"] / n_naive
        naive_np = t["naive_numpy"] / n_naive
        chunk1 = (t["chunk1"] - 2 * t["eval"]) / n_naive
        nbytes = round_bytes(problem, hp)
        roof = nbytes / (bw["stream_gbs"] * 1e9)
        diff = check_naive_matches_engine(problem, hp)
        rows.append({
            "problem": f"{'E1' if pname == 'lasso' else 'E2'} {pname}", "algorithm": "feddualavg",
            "engine_ms": engine * 1e3, "engine_rounds_s": 1 / engine, "engine_cpu_ms": engine_cpu * 1e3,
            "naive_key_ms": naive_key * 1e3, "naive_numpy_ms": naive_np * 1e3,
            "naive_numpy_cpu_ms": cpu["naive_numpy"] / n_naive * 1e3, "chunk1_ms": chunk1 * 1e3,
            "speedup_vs_key": naive_key / engine, "speedup_vs_numpy": naive_np / engine,
            "speedup_vs_chunk1": chunk1 / engine,
            "round_mb": nbytes / 1e6, "roofline_ms": roof * 1e3, "roofline_frac": roof / engine,
            "roofline_frac_cpu": roof / engine_cpu, "eval_ms": t["eval"] * 1e3, "naive_max_abs_diff": diff,
        })
        print(f"  local {pname}: {rows[-1]}", flush=True)
    out["local"] = rows

    # every E1 algorithm, engine only (the sweep extrapolation uses these)
    problem = build("lasso")
    algos = []
    for name in E1_ALGORITHMS:
        algorithm = make_algorithm(name, **E1_RATES)
        t = engine_round_time(problem, algorithm, 10 if quick else 300, repeats)
        algos.append({"algorithm": name, "ms": t * 1e3, "cpu_ms": CPU_TIMES["round"] * 1e3,
                      "rounds_s": 1 / t})
    out["local_algorithms"] = algos
    print(f"  local algorithms: {algos}", flush=True)


def section_scaling(out: dict, bw: dict, quick: bool, repeats: int) -> None:
    res = {}
    stream = bw["stream_gbs"] * 1e9

    def row(problem, algorithm, hp, rounds, naive_rounds=0, label=None):
        t = engine_round_time(problem, algorithm, rounds, repeats)
        r = {"ms": t * 1e3, "cpu_ms": CPU_TIMES["round"] * 1e3,
             "us_per_client_step": t * 1e6 / (hp.clients_per_round * hp.local_steps),
             "roofline_frac": round_bytes(problem, hp) / stream / t}
        if naive_rounds:  # the plain loop (numpy rng, its cheapest form), fewer repeats
            tn = median(timed(lambda: naive_feddualavg(problem, hp, naive_rounds, rng_kind="numpy"))
                        for _ in range(max(1, repeats // 2))) / naive_rounds
            r["naive_ms"] = tn * 1e3
            r["speedup"] = tn / t
        r.update(label or {})
        print(f"  scaling {r}", flush=True)
        return r

    # clients per round: one problem with 10,000 small clients (16 samples each, d = 1024)
    clients = 200 if quick else 10000
    problem = build("lasso", clients=clients, samples_per_client=16)
    rows = []
    for c in [10, 100, 1000, 10000]:
        if c > clients:
            continue
        hp = dict(E1_RATES, clients_per_round=c)
        algorithm = make_algorithm("feddualavg", **hp)
        rounds = max(2, int(2000 / c)) if not quick else max(1, int(50 / c))
        naive = max(1, int(200 / c))
        rows.append(row(problem, algorithm, algorithm.hp, rounds, naive, {"clients_per_round": c}))
    res["clients"] = {"problem": f"lasso clients={clients} samples_per_client=16 d=1024", "rows": rows}
    del problem

    dims = [256, 1024] if quick else [256, 1024, 4096, 16384]
    rows = []
    for d in dims:
        problem = build("lasso", dim=d, support=min(64, d))
        algorithm = make_algorithm("feddualavg", client_lr=1.0 / d)  # stable: lr ~ 1 / E||x||^2
        rows.append(row(problem, algorithm, algorithm.hp, 5 if quick else max(20, int(300 * 1024 / d)),
                        label={"dim": d}))
        del problem
    res["dim"] = {"problem": "lasso 64 x 128, C = 10, K = 10, B = 10", "rows": rows}

    problem = build("lasso")
    rows = []
    for k in [1, 10, 100]:
        algorithm = make_algorithm("feddualavg", **E1_RATES, local_steps=k)
        rows.append(row(problem, algorithm, algorithm.hp, 5 if quick else max(10, int(3000 / k)),
                        label={"local_steps": k}))
    res["K"] = {"problem": "lasso E1 (d = 1024, 64 x 128), C = 10, B = 10", "rows": rows}
    out["scaling"] = res


def section_ray(out: dict, quick: bool, repeats: int) -> None:
    try:
        import ray

    except ImportError as e:
        out["ray"] = {"skipped": f"the Ray backend is not importable: {e}"}
        print(f"  ray skipped: {e}", flush=True)
        return
    configs = {
        "E1 paper (d=1024, K=10, C=10)": dict(problem={}, hp=E1_RATES),
        # the same round with almost no work: its time is the backend's own cost
        "tiny work (d=16, K=1, C=10)": dict(problem=dict(dim=16, support=4),
                                            hp=dict(client_lr=0.01, local_steps=1)),
    }
    rounds = 5 if quick else 200
    if quick:  # a smoke run: the backend's own cost, one actor count per cluster
        configs = {k: v for k, v in configs.items() if k.startswith("tiny")}
    res = {"single_node": [], "multi_node": []}

    def measure(target: list, actor_counts, placement, label):
        for name, cfg in configs.items():
            problem = build("lasso", **cfg["problem"])
            algorithm = make_algorithm("feddualavg", **cfg["hp"])
            local = engine_round_time(problem, algorithm, rounds, repeats)
            for n in actor_counts:
                backend = make_backend({"name": "ray", "actors": n, "placement": placement}, problem)
                try:
                    t = engine_round_time(problem, algorithm, rounds, repeats, backend=backend)
                    nodes = len({s["node_id"] for s in backend.stats()})
                finally:
                    backend.close()
                over = t - local
                r = {"cluster": label, "work": name, "actors": n, "nodes_used": nodes,
                     "local_ms": local * 1e3, "ray_ms": t * 1e3, "overhead_ms": over * 1e3,
                     "overhead_per_actor_ms": over * 1e3 / n}
                target.append(r)
                print(f"  ray {r}", flush=True)

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        measure(res["single_node"], [1] if quick else [1, 2, 4], "pack",
                "one node, 4 logical CPUs on 2 cores")
    finally:
        if not quick:  # (--quick: the sweep section runs on this cluster too)
            ray.shutdown()

    if quick:  # the smoke run stops here: the simulated multi-node cluster takes most of a minute
        res["multi_node_skipped"] = "--quick"
        out["ray"] = res
        return
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(1 if quick else 2):
        cluster.add_node(num_cpus=2)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        measure(res["multi_node"], [2] if quick else [2, 4], "spread",
                "simulated: head (1 CPU) + 2 nodes x 2 CPUs, spread placement")
    finally:
        ray.shutdown()
        cluster.shutdown()
    out["ray"] = res


E1_SWEEP = ROOT / "sweeps" / "e1_lasso.yaml"
E1_GRID_TRIALS = 4 * 35 * 3  # algorithms x rate pairs x seeds of the full E1 grid


def section_sweep(out: dict, quick: bool, repeats: int) -> None:
    """Reduced versions of sweeps/e1_lasso.yaml through `fco_ray.sweep.run_sweep` (what
    `fco-ray sweep` runs), each in a fresh MLflow SQLite store and Tune directory."""
    try:
        from fco_ray.sweep import run_sweep
    except ImportError as e:
        out["sweep"] = {"skipped": f"the sweep runner is not importable: {e}"}
        print(f"  sweep skipped: {e}", flush=True)
        return
    import ray
    import yaml

    from fco_ray import run

    e1 = yaml.safe_load(E1_SWEEP.read_text())
    eval_every = int(e1["eval_every"])
    work = Path(tempfile.mkdtemp(prefix="fco_bench_sweep_"))
    # stable rates only: diverged trials stop early, so a grid with them costs less per trial
    # and the extrapolation from these trials is an upper bound
    grid = {"algorithm.client_lr": [1e-3, 3e-4], "algorithm.server_lr": [1.0, 0.3]}
    res = {"sweep_file": str(E1_SWEEP.relative_to(ROOT)), "runs": []}

    def sweep(tag: str, rounds: int, every: int, grid=grid):
        sets = [f"name=bench_{tag}", f"search.grid={json.dumps(grid)}", "seeds=[0]",
                f"rounds={rounds}", f"eval_every={every}", "report=false",
                f"tracking.uri=sqlite:///{work / tag}.db", f"tracking.experiment=bench_{tag}"]
        sets += ["algorithms=[feddualavg]"] if quick else []  # --quick: one trial per sweep
        cpus = ray.cluster_resources().get("CPU", 0)
        t = time.perf_counter()
        outcome = run_sweep(E1_SWEEP, sets, storage=work / "ray_results", echo=lambda s: None)
        wall = time.perf_counter() - t
        trials = len(outcome.results)
        totals = [r.metrics.get("time_total_s", float("nan")) for r in outcome.results]
        statuses = sorted({str(r.metrics.get("status")) for r in outcome.results})
        reports = len(range(0, rounds + 1, every)) + (rounds % every != 0)
        r = {"sweep": tag, "trials": trials, "rounds": rounds, "eval_every": every,
             "cluster_cpus": cpus, "reports_per_trial": reports, "wall_s": wall,
             "trials_per_min": 60 * trials / wall, "wall_per_trial_s": wall / trials,
             "median_trial_time_total_s": median(totals), "errors": outcome.errors,
             "statuses": ",".join(statuses), "parent_run_id": outcome.parent_run_id,
             "tracking_uri": outcome.tracking_uri}
        res["runs"].append(r)
        print(f"  sweep {r}", flush=True)
        return r

    t = time.perf_counter()
    # (--quick: every sweep, one trial each, on one cluster: the ray section's if it ran)
    if not (quick and ray.is_initialized()):
        ray.init(num_cpus=1 if quick else os.cpu_count(), include_dashboard=False, log_to_driver=False)
    res["ray_init_s"] = time.perf_counter() - t
    one = {"algorithm.client_lr": [1e-3], "algorithm.server_lr": [1.0]}
    try:
        # throughput at two lengths: wall time per trial = a + b * rounds
        short = sweep("short", 10 if quick else 100, eval_every, one if quick else grid)
        long_ = sweep("long", 20 if quick else 1000, eval_every, one if quick else grid)
    finally:
        if not quick:
            ray.shutdown()
    # cost of a report: the same 4 trials reporting twice vs every round, one trial at a
    # time (a 1-CPU cluster: no second trial shares the machine with the one measured)
    if not quick:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        length = 10 if quick else 200
        # (--quick: the short sweep above is this one: 10 rounds, one trial, reports at 0 and 10)
        few = short if quick else sweep("few_reports", length, length, one)
        many = sweep("many_reports", length, 1, one)
    finally:
        ray.shutdown()
    try:  # the sweep's report (drawn once at the end of a sweep; off in the runs above)
        from fco_ray.report import report_after_sweep

        res["report_s"] = timed(lambda: report_after_sweep(long_["parent_run_id"], long_["tracking_uri"],
                                                           echo=lambda s: None))
    except ImportError:
        res["report_s"] = float("nan")

    # the same trial as a plain fco_ray.run in this process: what an evaluation costs
    cfg = {"problem": {"name": "lasso"}, "rounds": length, "seed": 0,
           "algorithm": {"name": "feddualavg", "client_lr": 1e-3, "server_lr": 1.0}}
    t = interleaved({"few": lambda: run({**cfg, "eval_every": length}),
                     "many": lambda: run({**cfg, "eval_every": 1})}, repeats)
    extra = many["reports_per_trial"] - few["reports_per_trial"]
    eval_cost = (t["many"] - t["few"]) / extra
    per_report = (many["wall_per_trial_s"] - few["wall_per_trial_s"]) / extra
    res["report_overhead"] = {
        "plain_run_s_2_reports": t["few"], "plain_run_s_201_reports": t["many"],
        "eval_ms": eval_cost * 1e3, "sweep_per_report_ms": per_report * 1e3,
        "tune_mlflow_per_report_ms": (per_report - eval_cost) * 1e3,
        "sweep_vs_plain_trial_s": few["wall_per_trial_s"] - t["few"],
    }
    b = (long_["wall_per_trial_s"] - short["wall_per_trial_s"]) / (long_["rounds"] - short["rounds"])
    a = short["wall_per_trial_s"] - b * short["rounds"]
    # a line through two noisy points: when the longer sweep's trial was not slower, there is no
    # per-round cost to extrapolate from (a negative one would give negative minutes)
    minutes = ((res["ray_init_s"] + E1_GRID_TRIALS * (a + b * e1["rounds"]) + res["report_s"]) / 60
               if b > 0 else None)
    res["extrapolation"] = {"per_trial_fixed_s": a, "per_round_ms": b * 1e3, "trials": E1_GRID_TRIALS,
                            "rounds": e1["rounds"], "eval_every": eval_every, "minutes": minutes}
    print(f"  sweep {res['report_overhead']} {res['extrapolation']}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    out["sweep"] = res


def section_grid(out: dict, quick: bool, repeats: int) -> None:
    """The full E1 grid, measured: `fco-ray sweep sweeps/e1_lasso.yaml` exactly as a user runs
    it (its own local Ray cluster, an MLflow SQLite store, the report drawn at the end), in a
    temporary directory. Quick: seed 0 and 200 rounds (140 trials)."""
    work = Path(tempfile.mkdtemp(prefix="fco_bench_grid_"))
    sets = ["--set", f"tracking.uri=sqlite:///{work / 'mlflow.db'}"]
    if quick:
        sets += ["--set", "seeds=[0]", "--set", "rounds=200"]
    cli = Path(sys.executable).parent / "fco-ray"
    cmd = [str(cli), "sweep", str(E1_SWEEP), *sets, "--storage", str(work / "ray_results")]
    print(f"  grid: {' '.join(cmd)}", flush=True)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)  # the report lands in work
    wall = time.perf_counter() - t
    shutil.rmtree(work, ignore_errors=True)  # 420 trial directories, the store, the report
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    statuses: dict[str, int] = {}
    for ln in lines:  # "[n/N] trial: finished at round 2000, f1=..."
        word = ln.split(": ", 1)[1].split()[0] if ": " in ln else "?"
        statuses[word] = statuses.get(word, 0) + 1
    shown = [a.replace(str(work), "<tmp>") for a in
             ["fco-ray", "sweep", str(E1_SWEEP.relative_to(ROOT)), *sets, "--storage", str(work / "ray_results")]]
    res = {"command": " ".join(shown), "exit_code": proc.returncode,
           "wall_s": wall, "minutes": wall / 60, "trials": len(lines),
           "trials_per_min": 60 * len(lines) / wall, "statuses": statuses,
           "load_after": load_average()}
    if proc.returncode != 0:
        res["stderr_tail"] = proc.stderr[-2000:]
    print(f"  grid {res}", flush=True)
    out["grid"] = res


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------
def fmt(x, nd=3) -> str:
    if isinstance(x, float):
        return f"{x:.{nd}g}" if abs(x) < 1e4 else f"{x:.0f}"
    return str(x)


def table(rows: list[dict], cols: list[tuple[str, str]]) -> list[str]:
    lines = ["| " + " | ".join(h for _, h in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(k, "")) for k, _ in cols) + " |")
    return lines


def markdown(res: dict) -> str:
    m, bw = res["machine"], res["bandwidth"]
    L = [f"# fco_ray benchmarks, {res['date']}", "",
         f"Command: `{res['command']}`  ", f"Total time: {res['total_s']:.0f} s", "",
         "## Machine", ""]
    L += [f"- {k}: {v}" for k, v in m.items()]
    L += [f"- load average (1, 5, 15 min) at start: {res['load_start']}; at end: {res['load_end']}",
          "", "## Memory bandwidth", "",
          f"np.copyto between two {bw['array_gib']:.1f} GiB arrays, best of {max(res['repeats'], 5)}, "
          f"measured at the start and at the end of the run "
          f"({res['bandwidth_start']['stream_gbs']:.1f} and {res['bandwidth_end']['stream_gbs']:.1f} GB/s); "
          f"the higher is used: {bw['stream_gbs']:.1f} GB/s counting read + write (STREAM "
          f"convention; median {bw['median_stream_gbs']:.1f}), i.e. {bw['array_gbs']:.1f} GB/s of "
          "array copied. The roofline time of a round is (bytes a round must touch) / (STREAM GB/s).", ""]
    if res.get("targets"):
        L += ["## Targets (issue 8)", ""] + [f"- {t}" for t in res["targets"]] + [""]
    if "local" in res:
        L += ["## 1. Local backend at paper scale (FedDualAvg, K=10, B=10, 10 clients/round)", ""]
        L += table(res["local"], [
            ("problem", "problem"), ("engine_ms", "engine ms/round"), ("engine_rounds_s", "engine rounds/s"),
            ("naive_numpy_ms", "plain loop ms (np rng)"), ("naive_key_ms", "plain loop ms (keyed rng)"),
            ("chunk1_ms", "engine one client at a time ms"),
            ("speedup_vs_numpy", "speedup vs plain loop (np rng)"),
            ("speedup_vs_key", "speedup vs plain loop (keyed rng)"),
            ("speedup_vs_chunk1", "speedup vs one at a time")])
        L += ["", "Roofline and CPU time (CPU seconds of this process; wall - CPU = time spent "
              "waiting for a core under background load):", ""]
        L += table(res["local"], [
            ("problem", "problem"), ("round_mb", "MB a round must touch"), ("roofline_ms", "roofline ms"),
            ("engine_ms", "engine wall ms"), ("roofline_frac", "fraction of roofline (wall)"),
            ("engine_cpu_ms", "engine CPU ms"), ("roofline_frac_cpu", "fraction of roofline (CPU)"),
            ("naive_numpy_cpu_ms", "plain loop CPU ms"), ("eval_ms", "one evaluation ms"),
            ("naive_max_abs_diff", "max abs(engine - keyed loop) after 5 rounds")])
        L += ["", "Engine rounds/s for every E1 algorithm (client_lr 0.001):", ""]
        L += table(res["local_algorithms"], [("algorithm", "algorithm"), ("ms", "ms/round"),
                                             ("cpu_ms", "CPU ms/round"), ("rounds_s", "rounds/s")])
        L.append("")
    if "scaling" in res:
        L += ["## 2. Cost of a round (FedDualAvg, local backend)", ""]
        for key, col in (("clients", "clients_per_round"), ("dim", "dim"), ("K", "local_steps")):
            s = res["scaling"][key]
            L += [f"vs {col} ({s['problem']}):", ""]
            L += table(s["rows"], [(col, col), ("ms", "ms/round"), ("cpu_ms", "CPU ms/round"),
                                   ("us_per_client_step", "us per client-step"),
                                   ("roofline_frac", "fraction of roofline"), ("naive_ms", "loop ms/round"),
                                   ("speedup", "speedup vs loop")])
            L.append("")
    if "ray" in res:
        L += ["## 3. Ray backend", ""]
        if "skipped" in res["ray"]:
            L += [f"Not measured: {res['ray']['skipped']}", ""]
        else:
            rows = res["ray"]["single_node"] + res["ray"]["multi_node"]
            L += table(rows, [("cluster", "cluster"), ("work", "work"), ("actors", "actors"),
                              ("nodes_used", "nodes used"), ("local_ms", "local ms/round"),
                              ("ray_ms", "ray ms/round"), ("overhead_ms", "overhead ms/round"),
                              ("overhead_per_actor_ms", "overhead ms/actor/round")])
            L.append("")
    if "sweep" in res:
        L += ["## 4. Sweeps (Ray Tune + MLflow, local backend)", ""]
        s = res["sweep"]
        if "skipped" in s:
            L += [f"Not measured: {s['skipped']}", ""]
        else:
            L += table(s["runs"], [("sweep", "sweep"), ("trials", "trials"), ("rounds", "rounds"),
                                   ("eval_every", "eval_every"), ("cluster_cpus", "Ray CPUs"),
                                   ("wall_s", "wall s"),
                                   ("trials_per_min", "trials/min"), ("wall_per_trial_s", "wall s/trial"),
                                   ("median_trial_time_total_s", "median trial time_total_s"),
                                   ("errors", "errors")])
            o, x = s["report_overhead"], s["extrapolation"]
            L += ["", f"Sweep file: `{s['sweep_file']}` reduced with `--set` (2 x 2 stable rates, "
                  f"seed 0, `report=false`). Ray start: {s['ray_init_s']:.1f} s; drawing the sweep "
                  f"report once: {s['report_s']:.1f} s.", "",
                  f"Per reported round: {o['sweep_per_report_ms']:.1f} ms of trial wall time in a sweep "
                  f"(one trial at a time), of which the evaluation itself is {o['eval_ms']:.1f} ms "
                  f"(plain `fco_ray.run`), so Tune + MLflow add "
                  f"**{o['tune_mlflow_per_report_ms']:.1f} ms per report**. A 200-round trial with 2 "
                  f"reports costs {o['sweep_vs_plain_trial_s']:.2f} s more in a sweep than as a plain "
                  "run (trial start, MLflow run, Tune bookkeeping).", "",
                  (f"Extrapolation (not a measurement) to the full E1 grid, {x['trials']} trials x "
                   f"{x['rounds']} rounds, eval_every {x['eval_every']}, trials as concurrent as Tune "
                   f"runs them on this machine: wall time per trial = {x['per_trial_fixed_s']:.2f} s + "
                   f"{x['per_round_ms']:.2f} ms x rounds (line through the short and long sweeps), plus "
                   f"Ray start and one report -> **{x['minutes']:.1f} minutes**. All trials here are "
                   "stable; in the real grid the largest rates diverge and stop early, so this is an "
                   "upper bound." if x["minutes"] is not None else
                   "No extrapolation to the full E1 grid: the long sweep's trial was not slower than the "
                   "short one's (noise), so there is no per-round cost to extrapolate from."), ""]
    if "grid" in res:
        g = res["grid"]
        L += ["## 5. The full E1 grid, measured", "", f"Command: `{g['command']}`", "",
              f"Exit code {g['exit_code']}; **{g['minutes']:.1f} minutes** wall time for "
              f"{g['trials']} trials ({g['trials_per_min']:.1f} trials/min), statuses "
              f"{g['statuses']}; load average at the end {g['load_after']}. This includes "
              "starting Ray, every MLflow write and drawing the report.", ""]
    L += ["## Raw results (JSON)", "", "```json", json.dumps(res, indent=1, default=str), "```", ""]
    return "\n".join(L)


def targets(res: dict) -> list[str]:
    out = []
    if "local" in res:
        e1 = res["local"][0]
        worst = min(e1["speedup_vs_key"], e1["speedup_vs_numpy"])
        out.append(f"E1 local backend vs per-client loop >= 10x: {worst:.1f}x (vs the faster loop) -> "
                   f"{'met' if worst >= 10 else 'MISSED'}")
        out.append(f"E1 local backend >= 30% of roofline: {100 * e1['roofline_frac']:.0f}% by wall time "
                   f"({100 * e1['roofline_frac_cpu']:.0f}% by CPU time) -> "
                   f"{'met' if e1['roofline_frac'] >= 0.3 else 'MISSED'}")
    if "ray" in res and "single_node" in res["ray"]:
        worst = max(r["overhead_per_actor_ms"] for r in res["ray"]["single_node"])
        out.append(f"Ray overhead < 5 ms per actor per round on one machine: worst {worst:.2f} ms -> "
                   f"{'met' if worst < 5 else 'MISSED'}")
    if "grid" in res and res["grid"]["exit_code"] == 0 and res["grid"]["trials"] == E1_GRID_TRIALS:
        mins = res["grid"]["minutes"]
        out.append(f"Full E1 grid < 30 min (measured end to end): {mins:.1f} min -> "
                   f"{'met' if mins < 30 else 'MISSED'}")
    if "sweep" in res and "extrapolation" in res["sweep"]:
        mins = res["sweep"]["extrapolation"]["minutes"]
        out.append(f"Full E1 grid < 30 min (extrapolated): {mins:.1f} min -> {'met' if mins < 30 else 'MISSED'}"
                   if mins is not None else "Full E1 grid < 30 min (extrapolated): not judged, the long "
                   "sweep's trial was not slower than the short one's (no per-round cost to extrapolate from)")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: smaller sizes, one repeat, the results file in a temporary "
                         "directory unless --out names one")
    ap.add_argument("--only", default="local,scaling,ray,sweep",
                    help="comma-separated sections: local, scaling, ray, sweep, grid (grid: the "
                         "full E1 sweep, ~9 min; not in the default)")
    ap.add_argument("--repeats", type=int, default=None, help="timing repeats (median); default 5, quick 3")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/<date>.md)")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(sections) - {"local", "scaling", "ray", "sweep", "grid"}
    if unknown:
        ap.error(f"--only: unknown sections {sorted(unknown)}; allowed: local, scaling, ray, sweep, grid")
    repeats = args.repeats or (1 if args.quick else 5)
    t0 = time.perf_counter()
    res = {"date": _dt.datetime.now().isoformat(timespec="seconds"),
           "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/run.py", *sys.argv[1:]]),
           "repeats": repeats, "machine": machine_info(), "load_start": load_average()}
    print(f"machine: {res['machine']}\nload: {res['load_start']}", flush=True)
    bandwidth_bytes = GiB // 16 if args.quick else GiB // 2
    res["bandwidth"] = copy_bandwidth(max(repeats, 5), bandwidth_bytes)
    print(f"bandwidth: {res['bandwidth']}", flush=True)
    if "local" in sections:
        section_local(res, res["bandwidth"], args.quick, repeats)
    if "scaling" in sections:
        section_scaling(res, res["bandwidth"], args.quick, repeats)
    if "ray" in sections:
        section_ray(res, args.quick, repeats)
    if "sweep" in sections:
        section_sweep(res, args.quick, repeats)
    if "grid" in sections:
        section_grid(res, args.quick, repeats)
    res["load_end"] = load_average()
    res["bandwidth_start"] = res["bandwidth"]
    res["bandwidth_end"] = copy_bandwidth(max(repeats, 5), bandwidth_bytes)
    rescale_roofline(res, res["bandwidth_start"], res["bandwidth_end"])
    res["total_s"] = time.perf_counter() - t0
    res["targets"] = targets(res)
    text = markdown(res)
    results = Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else ROOT / "benchmarks" / "results"
    out = Path(args.out) if args.out else results / (_dt.datetime.now().strftime("%Y-%m-%d_%H%M") + ".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_file(out, text)
    print("\n".join(res["targets"]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
