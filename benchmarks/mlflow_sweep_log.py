"""What a sweep's driver pays MLflow per child run: `fco_ray.tracking.SweepLog` driven as
the driver of a fused E1 sweep drives it (start every configuration of a group, then a row
per configuration and evaluated round, then end them), on a fresh local SQLite store.

    .venv/bin/python benchmarks/mlflow_sweep_log.py [--runs 126] [--evals 6] [--repeats 3]
        [--code DIR] [--out FILE]

`--code DIR` imports fco_ray from another checkout (e.g. a worktree of an older commit), so
two versions are measured by the same script; run them one after the other, or interleaved
with `--code A,B`. Reported per child run: store writes (create_run, log_batch,
set_terminated, get_run calls), wall and CPU milliseconds (min and median over repeats).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("create_run", "log_batch", "set_terminated", "get_run")


def measure(runs: int, evals: int) -> dict:
    """One repeat in this process (fco_ray imported from sys.path)."""
    from fco_ray.sweep.checks import load_sweep
    from fco_ray.tracking.store import Store
    from fco_ray.tracking.sweeps import SweepLog

    sweep = load_sweep(ROOT / "sweeps/e1_lasso.yaml", ["tune.fuse=true"])
    point = next(iter(sweep.points()))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/mlflow.db")
        counts = dict.fromkeys(CALLS, 0)
        for name in CALLS:
            method = getattr(store.client, name)

            def counted(*a, _m=method, _n=name, **k):
                counts[_n] += 1
                return _m(*a, **k)
            setattr(store.client, name, counted)
        log = SweepLog(store, "bench", "bench", "f1", "max", "name: bench\n", resume=False)
        config = sweep.run_config(point).model_dump(mode="json")
        keys = [f"trial_{j:05d}" for j in range(runs)]
        counts = dict.fromkeys(CALLS, 0)
        wall, cpu = time.perf_counter(), time.process_time()
        for key in keys:
            log.start(key, config, key)
        for r in range(evals):
            for key in keys:
                log.add_row(key, {"round": 20 * r, "f1": 0.5, "density": 0.4, "loss": 1.0,
                                  "val_mse": 1.0, "support_error": 0.1, "precision": 0.5,
                                  "recall": 0.5})
        for key in keys:
            log.end(key, "finished")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {"wall_ms": 1e3 * wall / runs, "cpu_ms": 1e3 * cpu / runs,
                **{k: v / runs for k, v in counts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=126)
    parser.add_argument("--evals", type=int, default=6, help="rows per run (100 rounds, every 20)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--code", default=str(ROOT), help="checkouts to import fco_ray from, comma-separated")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 runs x 2 rows, one repeat")
    args = parser.parse_args()
    if args.quick and not args.child:
        args.runs, args.evals, args.repeats = 4, 2, 1
    if args.child:
        print(measure(args.runs, args.evals))
        return
    codes = args.code.split(",")
    results = {c: [] for c in codes}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeats):  # each version in a fresh process, interleaved
        for code in codes:
            env = {**os.environ, "PYTHONPATH": code}
            out = subprocess.run([sys.executable, __file__, "--child", "--runs", str(args.runs),
                                  "--evals", str(args.evals)], env=env, capture_output=True,
                                 text=True, check=True)
            results[code].append(eval(out.stdout.strip().splitlines()[-1]))  # our own dict repr
            loads.append(os.getloadavg()[0])
    lines = [f"# MLflow writes per child run of a sweep ({_dt.datetime.now():%Y-%m-%d %H:%M})", "",
             f"Command: `.venv/bin/python benchmarks/mlflow_sweep_log.py {' '.join(sys.argv[1:])}`",
             f"{args.runs} child runs x {args.evals} rows each, {args.repeats} repeats per version, "
             f"each in a fresh process, interleaved; 1-min load average during the run: "
             f"{min(loads):.1f}-{max(loads):.1f}.", "",
             "| code | commit | writes per run (create_run / log_batch / set_terminated / get_run) | "
             "wall ms per run: min / median | CPU ms per run: min / median |", "|---|---|---|---|---|"]
    for code, rs in results.items():
        commit = subprocess.run(["git", "-C", code, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        writes = " / ".join(f"{rs[0][k]:g}" for k in CALLS)
        w, c = [r["wall_ms"] for r in rs], [r["cpu_ms"] for r in rs]
        lines.append(f"| {code} | {commit} | {writes} | {min(w):.1f} / {median(w):.1f} | "
                     f"{min(c):.1f} / {median(c):.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_file(Path(args.out), text)


if __name__ == "__main__":
    main()
