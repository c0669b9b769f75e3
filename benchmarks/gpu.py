"""The device path on a GPU: per configuration-round times of fused groups on the real engine,
the CPU engine beside them, and the device-vs-CPU equality checks. One command:

    python benchmarks/gpu.py --out gpu-results            # a GPU machine, under 6 minutes
    python benchmarks/gpu.py --out /tmp/q --quick --device jax-cpu   # a smoke run anywhere (< 1 min)

Needs numpy, scipy, numba, pandas, pyyaml, pydantic and jax (with CUDA for `--device cuda`);
not Ray, not MLflow. Writes `gpu.json` and `gpu.md` under --out after every measurement, so
an interrupted run keeps what it measured.

What is timed: `fco_ray.core.plan.prepare(...).run` (the engine's round loop over a group of G,
`engine.run_rounds`, with `backend: {name: local, device: ...}`) over (1 + repeats) x E
rounds with an evaluation every E rounds (`EVERY`: the rounds the device compiles as one
program; the metrics are taken on the host between them). The first interval holds the
compilation ("first round" column: that interval / E); the others give the min and the median
of a round's wall time (interval / E), divided by the group size G (per configuration-round). Every
measurement runs in try/except: an error is recorded and the next one runs; a global time
guard (--time-limit) skips what would start too late.

Equality checks: a fused group of 3 client rates run by `fco_ray.run_grid` on the device and
on the CPU engine, every metric of every row compared (max relative difference, pass at
1e-9), for E1 (FedDualAvg on lasso), E5 l1 and E5 nuclear (FeDualEx), E2 (FedDualAvg on
lowrank) and E6 (FeDualEx and PGDA on adversarial), at the papers' sizes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

# the CPU engine single-threaded, as the CPU numbers it is compared with (issue 30, results/):
# a BLAS thread pool over small matrix products and SVDs mostly adds contention
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

E5_L1 = {"name": "bilinear_l1", "data_seed": 0}
E5_NUC = {"name": "bilinear_nuclear", "data_seed": 0}
E1 = {"name": "lasso"}
QUICK_L1 = {"name": "bilinear_l1", "n": 30, "m": 60, "clients": 10}
QUICK_NUC = {"name": "bilinear_nuclear", "n": 30, "m": 60, "p": 6, "rank": 3, "clients": 10}
E2 = {"name": "lowrank"}
E6 = {"name": "adversarial", "lam": 0.003, "data_seed": 0}  # sweeps/e6_adversarial.yaml
QUICK_E6 = {"name": "adversarial", "clients": 10, "lam": 0.003}
QUICK_E2 = {"name": "lowrank", "clients": 16, "samples_per_client": 16, "dim": 6, "rank": 2, "val_clients": 2}
QUICK_E1 = {"name": "lasso", "clients": 16, "samples_per_client": 32, "dim": 64, "support": 8,
            "val_clients": 2}


def base(problem: dict, algorithm: str, device: str, rounds: int) -> dict:
    if problem["name"] in ("lasso", "lowrank"):  # E1 / E2 as the FCO paper: K = 10, B = 10, 10 clients per round
        alg = {"name": algorithm, "local_steps": 10, "batch_size": 10, "clients_per_round": 10,
               "client_lr": 0.001}
    elif problem["name"] == "adversarial":  # E6: all clients, K = 5, B = 10
        alg = {"name": algorithm, "local_steps": 5, "batch_size": 10, "clients_per_round": None,
               "client_lr": 0.1}
    else:  # E5: 100 clients, full participation, K = 10
        alg = {"name": algorithm, "local_steps": 10, "batch_size": None, "clients_per_round": None,
               "client_lr": 0.01}
    return {"problem": problem, "algorithm": alg, "rounds": rounds, "eval_every": rounds,
            "seed": 0, "backend": {"name": "local", "device": device}}


def member_rates(problem: dict, g: int) -> list[float]:
    """G distinct client rates at which no member diverges within a few rounds (a member that
    diverges leaves the group, and the group's time would no longer be that of G)."""
    if g == 1:
        return [0.001 if problem["name"] == "lasso" else 0.01]
    lo, hi = (1e-5, 2e-3) if problem["name"] == "lasso" else (1e-3, 0.3)
    return [float(v) for v in np.geomspace(lo, hi, g)]


#: rounds between two evaluations in the timings (the papers' E5 setting evaluates every 4)
EVERY = {"bilinear_l1": 4, "bilinear_nuclear": 1, "lasso": 10}


def time_group(problem: dict, algorithm: str, device: str, g: int, repeats: int,
               route: str | None = None) -> dict:
    """Wall time per configuration-round of a group of G on the engine (module docstring).
    `route`: the nuclear prox's route on a device (`backend.nuclear_route`)."""
    from fco_ray.core.config import parse_run
    from fco_ray.core.plan import prepare

    every = EVERY.get(problem["name"], 4)
    cfg = base(problem, algorithm, device, every * (1 + repeats))
    cfg["eval_every"] = every
    if route is not None:
        cfg["backend"]["nuclear_route"] = route
    configs = []
    for lr in member_rates(problem, g):
        raw = json.loads(json.dumps(cfg))
        raw["algorithm"]["client_lr"] = lr
        configs.append(parse_run(raw))
    stamps: list[float] = []
    t_build = time.perf_counter()
    prepared = prepare(configs)
    outcome = prepared.run(lambda rnd, rows, ended: stamps.append(time.perf_counter()))
    statuses = [r.status for r in outcome]
    if len(stamps) != 2 + repeats:
        raise RuntimeError(f"expected {2 + repeats} evaluations, got {len(stamps)} (statuses {statuses})")
    laps = np.diff(stamps)[1:] / every  # the first interval holds the compilation
    return {"problem": problem["name"], "algorithm": algorithm, "device": device, "G": g,
            "rounds_timed": len(laps) * every, "every": every,
            "first_round_s": (stamps[1] - stamps[0]) / every,
            "build_and_round0_s": stamps[0] - t_build,
            "round_min_s": float(laps.min()), "round_median_s": float(np.median(laps)),
            "per_config_round_min_ms": float(laps.min() / g * 1e3),
            "per_config_round_median_ms": float(np.median(laps) / g * 1e3),
            "diverged": statuses.count("diverged"), **({"route": route} if route else {})}


def equality(problem: dict, algorithm: str, device: str, rounds: int, rates: list[float],
             route: str | None = None) -> dict:
    """run_grid of a fused group on the device vs the CPU engine: max relative difference."""
    import fco_ray

    grid = {"algorithm.client_lr": rates}
    on_device = base(problem, algorithm, device, rounds) | {"eval_every": 1}
    if route is not None:
        on_device["backend"]["nuclear_route"] = route
    t = time.perf_counter()
    dev = fco_ray.run_grid(on_device, grid)
    t_dev = time.perf_counter() - t
    t = time.perf_counter()
    cpu = fco_ray.run_grid(base(problem, algorithm, "cpu", rounds) | {"eval_every": 1}, grid)
    t_cpu = time.perf_counter() - t
    if list(dev.columns) != list(cpu.columns) or len(dev) != len(cpu):
        raise RuntimeError(f"different tables: {list(dev.columns)} x {len(dev)} vs {list(cpu.columns)} x {len(cpu)}")
    worst, where = 0.0, ""
    for col in cpu.columns:
        a, b = cpu[col].to_numpy(), dev[col].to_numpy()
        if a.dtype.kind not in "fi":
            if list(a) != list(b):
                raise RuntimeError(f"column {col} differs: {list(a)} vs {list(b)}")
            continue
        a, b = a.astype(float), b.astype(float)
        both_inf = np.isinf(a) & (a == b)
        rel = np.where(both_inf, 0.0, np.abs(a - b) / np.maximum(np.abs(a), 1e-300))
        rel = np.where(a == b, 0.0, rel)
        if rel.max() > worst:
            worst, where = float(rel.max()), col
    return {"problem": problem["name"], "algorithm": algorithm + (f" ({route} route)" if route else ""),
            "device": device, "G": len(rates),
            "rounds": rounds, "rows": len(cpu), "max_rel_diff": worst, "worst_column": where,
            "pass_1e-9": bool(worst <= 1e-9), "device_s": t_dev, "cpu_s": t_cpu}


def environment(device: str) -> dict:
    env = {"python": sys.version.split()[0], "platform": platform.platform(),
           "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
           "cpus": os.cpu_count(), "numpy": np.__version__, "argv": sys.argv,
           "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    try:
        env["loadavg"] = os.getloadavg()
    except OSError:
        pass
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        env["jax"] = jax.__version__
        env["jax_devices"] = [str(d) for d in jax.devices()]
        try:
            gpu = jax.devices("gpu")[0]
            env["gpu"] = getattr(gpu, "device_kind", str(gpu))
        except RuntimeError as e:
            env["gpu"] = f"none ({e})"
    except Exception as e:  # noqa: BLE001 - recorded, the CPU rows still run
        env["jax"] = f"unavailable: {e!r}"
    return env


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = ["# Device path benchmark (benchmarks/gpu.py)", "",
             f"Command: `{' '.join(env['argv'])}`; started {env['started_utc']} UTC; "
             f"device `{result['device']}` ({env.get('gpu', '?')}); JAX {env.get('jax')}; "
             f"{env['cpus']} CPUs (CPU engine with BLAS threads = {env.get('blas_threads')}); "
             f"load {env.get('loadavg')}.", "",
             "## Per configuration-round (wall time of a round / G; rounds compiled E at a time, metrics between)", "",
             "| problem | algorithm | device | G | min | median | first round (compile) | rounds timed | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["timings"]:
        if "error" in r or "skipped" in r:
            note = r.get("skipped") or r["error"].strip().splitlines()[-1][:160]
            lines.append(f"| {r['problem']} | {r['algorithm']} | {r['device']} | {r['G']} | | | | | {note} |")
            continue
        unit, scale = ("us", 1e3) if r["per_config_round_min_ms"] < 0.1 else ("ms", 1.0)
        note = f"{r['diverged']} diverged" if r["diverged"] else ""
        note = (note + f" nuclear prox route {r['route']}").strip() if "route" in r else note
        lines.append(f"| {r['problem']} | {r['algorithm']} | {r['device']} | {r['G']} | "
                     f"{r['per_config_round_min_ms'] * scale:.3g} {unit} | "
                     f"{r['per_config_round_median_ms'] * scale:.3g} {unit} | "
                     f"{r['first_round_s']:.2f} s | {r['rounds_timed']} | {note} |")
    lines += ["", "## Equality: device vs CPU engine (run_grid of a fused group, every metric of every row)", "",
              "| problem | algorithm | G | rounds | max relative difference | column | pass (1e-9) | device s | CPU s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in result["equality"]:
        if "error" in r or "skipped" in r:
            note = r.get("skipped") or r["error"].strip().splitlines()[-1][:160]
            lines.append(f"| {r['problem']} | {r['algorithm']} | | | {note} | | FAIL/skipped | | |")
            continue
        lines.append(f"| {r['problem']} | {r['algorithm']} | {r['G']} | {r['rounds']} | "
                     f"{r['max_rel_diff']:.2e} | {r['worst_column']} | {'yes' if r['pass_1e-9'] else 'NO'} | "
                     f"{r['device_s']:.1f} | {r['cpu_s']:.1f} |")
    lines += ["", f"Not covered: {', '.join(result['not_covered'])}.", "",
              f"Total wall time {result.get('wall_s', 0):.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="directory for gpu.json and gpu.md (required "
                    "but with --quick: a temporary directory)")
    ap.add_argument("--device", default=None, choices=["cuda", "jax-cpu"],
                    help="default cuda; with --quick, jax-cpu")
    ap.add_argument("--quick", action="store_true", help="tiny problems, G = 3: a smoke run")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds after the first (default 5, quick 2)")
    ap.add_argument("--time-limit", type=float, default=330.0,
                    help="seconds: a measurement that would start later is skipped (default 330)")
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU engine's timings")
    args = ap.parse_args(argv)
    if args.quick:
        args.out = args.out or tempfile.mkdtemp(prefix="fco-bench-")
    args.device = args.device or ("jax-cpu" if args.quick else "cuda")
    if args.out is None:
        ap.error("--out is required (or --quick)")
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    repeats = args.repeats or (2 if args.quick else 5)
    l1, nuc, e1 = (QUICK_L1, QUICK_NUC, QUICK_E1) if args.quick else (E5_L1, E5_NUC, E1)
    dev = args.device
    result = {"device": dev, "environment": environment(dev), "timings": [], "equality": [],
              "not_covered": ["timings of E2 and E6 (their equality is checked)"]}

    def save():
        result["wall_s"] = time.perf_counter() - t0
        write_file(out / "gpu.json", json.dumps(result, indent=1, default=str))
        write_file(out / "gpu.md", markdown(result))

    def guarded(kind: str, label: dict, fn, *a, need: float = 0.0):
        """Run one measurement unless the time guard says no; record its error otherwise."""
        left = args.time_limit - (time.perf_counter() - t0)
        if left < need:
            result[kind].append({**label, "skipped": f"time guard ({left:.0f} s left, needs ~{need:.0f})"})
        else:
            try:
                result[kind].append(fn(*a))
            except Exception:  # noqa: BLE001 - recorded, the next measurement runs
                result[kind].append({**label, "error": traceback.format_exc()})
        print(json.dumps(result[kind][-1], default=str)[:400], flush=True)
        save()

    eq_rounds = 2 if args.quick else 3

    def check(prob, alg, rounds, rates, need):
        label = {"problem": prob["name"], "algorithm": alg, "device": dev}
        guarded("equality", label, equality, prob, alg, dev, rounds, rates, need=need)

    # 1. equality first: the numbers must be right before their speed matters (the nuclear
    # one after the device timings: its CPU side takes ~5 s per configuration-round)
    check(e1, "feddualavg", eq_rounds, [0.003, 0.001, 0.0003], 20)
    check(l1, "feddualex", eq_rounds, [0.1, 0.03, 0.01], 20)
    check(QUICK_E2 if args.quick else E2, "feddualavg", eq_rounds, [0.003, 0.001, 0.0003], 20)
    check(QUICK_E6 if args.quick else E6, "feddualex", eq_rounds, [1.0, 0.3, 0.1], 20)
    check(QUICK_E6 if args.quick else E6, "pgda", eq_rounds, [1.0, 0.3, 0.1], 20)
    # 2. the device, largest groups last within each problem (a failure there keeps the rest)
    # (--quick: one fused size each, every program compiled once: a smoke run, not a figure)
    sizes = {"e5": (3,), "nuc": (3,), "e1": (3,)} if args.quick else \
        {"e5": (1, 35, 350), "nuc": (1, 35), "e1": (1, 35, 504)}
    plan = [(l1, "feddualex", g) for g in sizes["e5"]] + [(e1, "feddualavg", g) for g in sizes["e1"]] \
        + [(nuc, "feddualex", g) for g in sizes["nuc"]]
    for prob, alg, g in plan:
        label = {"problem": prob["name"], "algorithm": alg, "device": dev, "G": g}
        guarded("timings", label, time_group, prob, alg, dev, g, repeats, need=15)
    check(nuc, "feddualex", 2, [0.3, 0.03], 60)
    # 3. the CPU engine beside it, at sizes it finishes in seconds
    if not args.no_cpu:
        cpu_plan = [(l1, "feddualex", g, 2) for g in ((1, 3) if args.quick else (1, 35))] \
            + [(e1, "feddualavg", g, repeats) for g in ((1, 3) if args.quick else (1, 35, 504))] \
            + [(nuc, "feddualex", 1, 1 if not args.quick else 2)]
        for prob, alg, g, reps in cpu_plan:
            label = {"problem": prob["name"], "algorithm": alg, "device": "cpu", "G": g}
            guarded("timings", label, time_group, prob, alg, "cpu", g, reps, need=25)
    # 4. the nuclear prox by the eigenvalues of X^T X instead of the Householder R (the
    # default): how much the route matters on this device, and whether it keeps 1e-9
    for g in ((3,) if args.quick else (1, 35)):
        label = {"problem": nuc["name"], "algorithm": "feddualex", "device": dev, "G": g, "route": "gram"}
        guarded("timings", label, time_group, nuc, "feddualex", dev, g, 2, "gram", need=40)
    label = {"problem": nuc["name"], "algorithm": "feddualex", "device": dev, "route": "gram"}
    guarded("equality", label, equality, nuc, "feddualex", dev, 2, [0.3, 0.03], "gram", need=60)
    save()
    print((out / "gpu.md").read_text())
    failed = [r for r in result["equality"] if not r.get("pass_1e-9")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
