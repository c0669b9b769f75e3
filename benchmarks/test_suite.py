"""How long the test suite takes: the README's fast subset and the whole suite, each run once
with pytest, timed, with the machine's load average before and after.

    .venv/bin/python benchmarks/test_suite.py [--only fast,full] [--out benchmarks/results/test_suite.md]
    .venv/bin/python benchmarks/test_suite.py --pages   # README.md and docs/benchmarks.md from the record
    .venv/bin/python benchmarks/test_suite.py --quick   # a smoke run: one small test file

Writes the record (`test_suite.json`: per run the command, wall seconds, passed / failed /
skipped, the load averages, the slowest tests; a run of one kind replaces the record's
earlier run of that kind) and its page (`test_suite.md`); `--pages`
then writes the README's test-time sentence and the test-suite section of
docs/benchmarks.md from the record, between their `<!-- benchmarks/test_suite.py -->`
markers. Wall times move with the load: other jobs on a shared 2-core machine slow every
test that computes.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FAST = ["-m", "not slow and not ray"]
RUNS = {"fast": FAST, "full": []}
MARK = "<!-- benchmarks/test_suite.py -->"
END = "<!-- /benchmarks/test_suite.py -->"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(name: str, selection: list[str], work: Path, quick: bool) -> dict:
    xml = work / f"{name}.xml"
    args = ["tests/unit/test_prox.py", "-n", "0"] if quick else []  # quick: in one process
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection, *args,
           f"--junitxml={xml}"]
    before = load()
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = load()
    cases = ET.parse(xml).getroot().iter("testcase")
    counts, slowest, failures = {"passed": 0, "failed": 0, "skipped": 0}, [], []
    for case in cases:
        kind = ("failed" if case.find("failure") is not None or case.find("error") is not None
                else "skipped" if case.find("skipped") is not None else "passed")
        counts[kind] += 1
        test = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        slowest.append((float(case.get("time", 0)), test))
        if kind == "failed":
            failures.append(test)
    slowest.sort(reverse=True)
    shown = ".venv/bin/python -m pytest -q" + "".join(f' -m "{s}"' for s in selection[1::2])
    print(f"{name}: {wall:.0f} s, {counts}, load {before} -> {after}", flush=True)
    return {"name": name, "command": shown, "exit_code": done.returncode, "wall_s": round(wall, 1),
            **counts, "failures": failures, "load_before": before, "load_after": after,
            "slowest": [{"s": round(t, 1), "test": test} for t, test in slowest[:15]]}


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} minutes" if seconds >= 120 else f"{seconds:.0f} s"


def loads(r: dict) -> str:
    return f"{r['load_before'][0]:.1f} at the start, {r['load_after'][0]:.1f} at the end"


def page(record: dict) -> str:
    lines = [f"# The test suite, {record['date']}", "",
             f"Command: `{record['command']}` (commit {record['commit']}, {record['cpus']} CPUs; "
             "load: the 1-minute load average before and after each run).", "",
             "| run | started | commit | command | tests passed / failed / skipped | wall | load average |",
             "|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append(f"| {r['name']} | {r['date']} | {r['commit']} | `{r['command']}` | {r['passed']} / "
                     f"{r['failed']} / {r['skipped']} | {r['wall_s']:.0f} s | {loads(r)} |")
    for r in record["runs"]:
        lines += ["", f"## The slowest tests of the {r['name']} run", "", "| s | test |", "|---|---|"]
        lines += [f"| {t['s']:.1f} | `{t['test']}` |" for t in r["slowest"]]
    return "\n".join(lines) + "\n"


def readme_sentence(record: dict) -> str:
    runs = {r["name"]: r for r in record["runs"]}
    full, fast = runs["full"], runs["fast"]
    return (f"About {minutes(full['wall_s'])} on 2 cores for {full['passed'] + full['failed']} "
            f"tests ({fast['wall_s']:.0f} s for the fast subset; "
            f"[timings](docs/benchmarks.md#the-test-suite)).")


def docs_section(record: dict) -> str:
    runs = {r["name"]: r for r in record["runs"]}
    full, fast = runs["full"], runs["fast"]
    return (f"In two pytest-xdist workers (`-n 2`, set in pyproject.toml), the whole suite took "
            f"{full['wall_s']:.0f} s ({minutes(full['wall_s'])}) for "
            f"{full['passed']} passed and {full['skipped']} skipped tests, load average "
            f"{loads(full)}; the fast subset (`-m \"not slow and not ray\"`) {fast['wall_s']:.0f} s "
            f"for {fast['passed']} passed and {fast['skipped']} skipped, load average {loads(fast)} "
            f"({full['date']}, commit {full['commit']}; the record and the slowest tests: "
            "`benchmarks/results/test_suite.md`, written by `benchmarks/test_suite.py`).")


def replace_marked(path: Path, text: str) -> None:
    old = path.read_text()
    start, end = old.index(MARK) + len(MARK), old.index(END)
    write_file(path, old[:start] + text + old[end:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="fast,full", help="comma-separated: fast, full")
    ap.add_argument("--out", default=None, help="default benchmarks/results/test_suite.md")
    ap.add_argument("--pages", action="store_true", help="write README.md and docs/benchmarks.md "
                    "from the record (no test run)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: tests/unit/test_prox.py as "
                    "each run, the record in a temporary directory unless --out names one")
    args = ap.parse_args()
    results = Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else RESULTS
    out = Path(args.out) if args.out else results / "test_suite.md"
    if args.pages:
        record = json.loads(out.with_suffix(".json").read_text())
        replace_marked(ROOT / "README.md", "\n" + textwrap.fill(readme_sentence(record), 160) + "\n")
        replace_marked(ROOT / "docs" / "benchmarks.md", "\n" + textwrap.fill(docs_section(record), 92) + "\n")
        print(readme_sentence(record))
        return 0
    names = [n for n in args.only.split(",") if n]
    if set(names) - set(RUNS):
        ap.error(f"--only: {sorted(set(names) - set(RUNS))} not in {sorted(RUNS)}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = {"date": _dt.datetime.now().isoformat(timespec="minutes"), "commit": commit,
              "cpus": os.cpu_count(), "command": "python benchmarks/test_suite.py " + " ".join(sys.argv[1:]),
              "runs": []}
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            started = _dt.datetime.now().isoformat(timespec="minutes")
            record["runs"].append({"date": started, "commit": commit,
                                   **run(name, RUNS[name], Path(work), args.quick)})
    if out.with_suffix(".json").is_file():  # the latest run of each kind is kept
        kept = json.loads(out.with_suffix(".json").read_text())["runs"]
        record["runs"] = [r for r in kept if r["name"] not in names] + record["runs"]
        record["runs"].sort(key=lambda r: list(RUNS).index(r["name"]))
    write_file(out.with_suffix(".json"), json.dumps(record, indent=1) + "\n")
    write_file(out, page(record))
    print(f"wrote {out}")
    return 0 if all(r["exit_code"] == 0 for r in record["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
