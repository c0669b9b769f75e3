"""How long a new SQLite store takes to open in a fresh process: a copy of the template store
(`fco_ray.tracking.template`) beside MLflow's own setup (its schema migrations), interleaved.

    .venv/bin/python benchmarks/mlflow_new_store.py [--repeats 5] [--out benchmarks/results/mlflow_new_store.md]
    .venv/bin/python benchmarks/mlflow_new_store.py --quick   # one repeat, record in a temporary directory

Each start is a new Python process that imports `fco_ray.tracking.store` and opens
`Store("sqlite:///<new file>")`; the time of that call is what the process reports. "from the
template": its cache directory (XDG_CACHE_HOME) holds the template; "MLflow's setup": an empty
cache directory of its own, so MLflow migrates the store (and the store becomes that
directory's template, unused). The record (`mlflow_new_store.json`) holds every time and the
load average before and after; the page (`mlflow_new_store.md`) the minimum and median.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.record import header, interleaved_page, load, options, write

OPEN = """
import sys, time
from fco_ray.tracking.store import Store
start = time.perf_counter()
Store(f"sqlite:///{sys.argv[1]}")
print(time.perf_counter() - start)
"""
CASES = ("from the template", "MLflow's setup (migrations)")


def open_new(db: Path, cache: Path) -> float:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    done = subprocess.run([sys.executable, "-c", OPEN, str(db)], env=env, capture_output=True, text=True,
                          cwd=db.parent)
    if done.returncode != 0:
        raise SystemExit(f"opening {db}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def page(r: dict) -> str:
    return interleaved_page(r, "A new MLflow store", "new stores (each in a fresh process)",
                            "Seconds of `Store(uri)` on a new SQLite file.", "new store", 2)


def main() -> int:
    args = options(__doc__, "mlflow_new_store", 5, "one repeat")
    import mlflow

    repeats = args.repeats
    work = Path(tempfile.mkdtemp(prefix="fco-new-store-"))
    shared = work / "cache"
    open_new(work / "seed.db", shared)  # makes the template of `shared` (not timed)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    before = load()
    for i in range(repeats):
        times[CASES[0]].append(round(open_new(work / f"copy{i}.db", shared), 3))
        times[CASES[1]].append(round(open_new(work / f"migrated{i}.db", work / f"empty{i}"), 3))
        print({k: v[-1] for k, v in times.items()}, flush=True)
    record = {**header(args.command),
              "mlflow": mlflow.__version__, "repeats": repeats, "load_before": before, "load_after": load(),
              "cases": times}
    write(args.out, record, page(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
