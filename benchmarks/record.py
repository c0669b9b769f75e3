"""What the newer benchmark scripts share: a record's header (date, commit, command, CPU), the
load average, where the record goes, a table of each case's minimum and median, and writing
the record (`NAME.json`) and its page (`NAME.md`) through `fco_ray.runtime.files`."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from benchmarks.machine import cpu_model
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def header(command: str) -> dict:
    """The fields every record starts with; the commit is `git describe --dirty` of the checkout."""
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"date": _dt.datetime.now().isoformat(timespec="minutes"), "commit": commit, "command": command,
            "cpus": os.cpu_count(), "cpu": cpu_model()}


def out_path(out: str | None, quick: bool, name: str) -> Path:
    """`--out` if given, else `benchmarks/results/NAME.md` (a new temporary folder for `--quick`)."""
    if out:
        return Path(out)
    return (Path(tempfile.mkdtemp(prefix="fco-bench-")) if quick else RESULTS) / f"{name}.md"


def options(doc: str, name: str, repeats: int | None, quick: str) -> argparse.Namespace:
    """The command line of a benchmark `benchmarks/NAME.py` (`--repeats` unless `repeats` is
    None, `--out`, `--quick`, which does `quick` with one repeat), parsed: `repeats` (1 with
    `--quick`), `out` (`out_path`) and `command`, the command that the record names."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--out", default=None, help=f"default benchmarks/results/{name}.md")
    ap.add_argument("--quick", action="store_true", help=f"{quick}; the record in a temporary "
                    "directory unless --out names one")
    args = ap.parse_args()
    args.repeats = 1 if args.quick or repeats is None else args.repeats
    args.out = out_path(args.out, args.quick, name)
    args.command = f"python benchmarks/{name}.py" + (" --quick" if args.quick else
                                                     "" if repeats is None else f" --repeats {args.repeats}")
    return args


def min_median_table(cases: dict[str, list[float]], what: str, digits: int) -> list[str]:
    rows = [f"| {what} | min s | median s |", "|---|---|---|"]
    return rows + [f"| {name} | {min(v):.{digits}f} | {statistics.median(v):.{digits}f} |" for name, v in cases.items()]


def interleaved_page(r: dict, title: str, per_case: str, what: str, column: str, digits: int) -> str:
    """The page of a record whose cases ran interleaved, `r["repeats"]` times each (with the
    MLflow version it ran against): a title, how it was measured, and `min_median_table`."""
    lines = [f"# {title}, {r['date']}", "",
             f"Written by `{r['command']}` (commit {r['commit']}, {r['cpus']} x {r['cpu']}, {r['repeats']} "
             f"{per_case} per case, interleaved; load average {r['load_before']} before, {r['load_after']} "
             f"after; MLflow {r['mlflow']}). {what}", "", *min_median_table(r["cases"], column, digits)]
    return "\n".join(lines) + "\n"


def write(out: Path, record: dict, page: str) -> None:
    write_file(out.with_suffix(".json"), json.dumps(record, indent=1) + "\n")
    write_file(out, page)
    print(page)
