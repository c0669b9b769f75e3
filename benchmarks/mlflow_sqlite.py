"""MLflow writes to a local SQLite store: rollback journal (SQLite's default) vs write-ahead
log (what fco_ray.tracking.store.Store sets), side by side, interleaved.

    .venv/bin/python benchmarks/mlflow_sqlite.py [--runs 20] [--rounds 5] [--repeats 3] [--quick]

Each case: a fresh store, `--runs` runs, then `--rounds` rounds of one `log_batch` of 8
metrics per run (what a sweep's driver writes per evaluated round and configuration).
Reported: ms per log_batch (min and median over repeats) and the ratio. Writes
benchmarks/results/mlflow_sqlite.md.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from statistics import median

from mlflow import MlflowClient
from mlflow.entities import Metric
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]


def per_batch(mode: str, runs: int, rounds: int) -> float:
    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks") as tmp:
        db = Path(tmp) / "mlflow.db"
        client = MlflowClient(f"sqlite:///{db}")
        experiment = client.create_experiment("bench")
        if mode == "wal":
            with sqlite3.connect(db) as connection:
                connection.execute("pragma journal_mode=wal")
        ids = [client.create_run(experiment).info.run_id for _ in range(runs)]
        start = time.perf_counter()
        for step in range(rounds):
            for run in ids:
                client.log_batch(run, metrics=[Metric(k, 1.0, 0, step) for k in "abcdefgh"])
        return (time.perf_counter() - start) / (runs * rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 2 runs, 2 rounds, one repeat, the page in a temporary "
                             "directory")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.rounds, args.repeats = 2, 2, 1
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    times = {"delete": [], "wal": []}
    for _ in range(args.repeats):
        for mode in times:
            times[mode].append(per_batch(mode, args.runs, args.rounds))
    lines = [f"# MLflow log_batch on a local SQLite store ({_dt.datetime.now():%Y-%m-%d %H:%M})", "",
             f"Command: `.venv/bin/python benchmarks/mlflow_sqlite.py --runs {args.runs} --rounds "
             f"{args.rounds} --repeats {args.repeats}`; load average at start {load}, at the end "
             + " / ".join(f"{x:.1f}" for x in os.getloadavg()) + "; database on the repository's disk.", "",
             "| journal mode | ms per log_batch, min / median |", "|---|---|"]
    for mode, values in times.items():
        lines.append(f"| {mode} | {min(values) * 1e3:.1f} / {median(values) * 1e3:.1f} |")
    lines += ["", f"rollback journal / write-ahead log (medians): "
              f"{median(times['delete']) / median(times['wal']):.1f}x"]
    out = (Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
           ROOT / "benchmarks" / "results") / "mlflow_sqlite.md"
    write_file(out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
