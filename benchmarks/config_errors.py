"""How fast a wrong configuration is refused: `fco-ray run` and `fco-ray sweep` on files with one
bad value, each a fresh process as a user starts it, beside `python -c pass` (the interpreter
alone) in the same run.

    .venv/bin/python benchmarks/config_errors.py [--repeats 7] [--out benchmarks/results/config_errors.md]
    .venv/bin/python benchmarks/config_errors.py --quick    # one repeat, record in a temporary directory

Every case must exit with code 2 and one line on stderr (else the script fails). The record
(`config_errors.json`) holds each case's wall times and the load average before and after; the
page (`config_errors.md`) its minimum and median. The goal: every refusal under half a second.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
GOAL_S = 0.5

RUN = "problem: {name: lasso}\nalgorithm: {name: feddualavg, client_lr: -1}\nrounds: 10\n"
SWEEP = ("name: bad\nproblem: {name: lasso}\nalgorithms: [feddualavg]\nrounds: 10\n"
         "search:\n  grid:\n    algorithm.client_lr: [0.1, -1]\n")


def cases(work: Path) -> dict[str, list[str]]:
    write_file(work / "run.yaml", RUN)
    write_file(work / "sweep.yaml", SWEEP)
    write_file(work / "good.yaml", RUN.replace("-1", "0.1"))
    fco = [sys.executable, "-m", "fco_ray"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "fco-ray run run.yaml (client_lr: -1)": fco + ["run", "run.yaml"],
        "fco-ray run good.yaml --set algorithm.client_lr=0.0l": fco + ["run", "good.yaml", "--set",
                                                                        "algorithm.client_lr=0.0l"],
        "fco-ray sweep sweep.yaml (a grid value -1)": fco + ["sweep", "sweep.yaml"],
    }


def time_case(argv: list[str], work: Path, expect_error: bool) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=work, capture_output=True, text=True,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work}/m.db"})
    wall = time.perf_counter() - start
    if expect_error and (done.returncode != 2 or done.stderr.count("\n") != 1):
        raise SystemExit(f"{argv[3:]}: exit {done.returncode}, stderr:\n{done.stderr}")
    return wall


def page(record: dict) -> str:
    lines = [f"# Config errors, {record['date']}", "",
             f"Written by `{record['command']}` (commit {record['commit']}, {record['cpus']} CPUs, "
             f"{record['repeats']} repeats per case, interleaved; load average "
             f"{record['load_before']} before, {record['load_after']} after). Each case is a fresh "
             "process, exit code 2 and one line of error checked.", "",
             "| case | min s | median s | under 0.5 s (min) |", "|---|---|---|---|"]
    for name, walls in record["cases"].items():
        ok = "" if name == "python -c pass" else ("yes" if min(walls) < GOAL_S else "no")
        lines.append(f"| `{name}` | {min(walls):.2f} | {statistics.median(walls):.2f} | {ok} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None, help="default benchmarks/results/config_errors.md")
    ap.add_argument("--quick", action="store_true", help="one repeat; the record in a temporary "
                    "directory unless --out names one")
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    results = Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else RESULTS
    out = Path(args.out) if args.out else results / "config_errors.md"
    work = Path(tempfile.mkdtemp(prefix="fco-errors-"))
    argvs = cases(work)
    walls: dict[str, list[float]] = {name: [] for name in argvs}
    before = [round(x, 2) for x in os.getloadavg()]
    time_case(argvs["fco-ray run run.yaml (client_lr: -1)"], work, True)  # warm the file cache
    for _ in range(repeats):
        for name, argv in argvs.items():
            walls[name].append(round(time_case(argv, work, name != "python -c pass"), 3))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = {"date": _dt.datetime.now().isoformat(timespec="minutes"), "commit": commit,
              "command": f"python benchmarks/config_errors.py --repeats {repeats}",
              "cpus": os.cpu_count(), "repeats": repeats, "load_before": before,
              "load_after": [round(x, 2) for x in os.getloadavg()], "cases": walls}
    write_file(out.with_suffix(".json"), json.dumps(record, indent=1) + "\n")
    write_file(out, page(record))
    print(page(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
