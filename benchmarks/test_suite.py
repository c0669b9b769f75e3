"""How long the test suite takes: the README's fast subset and the whole suite, each run with
pytest (once, or `--repeat N` times), timed, with the machine's load average before and after.

    .venv/bin/python benchmarks/test_suite.py [--only fast,full,install] [--cold] [--repeat N] [--out benchmarks/results/test_suite.md]
    .venv/bin/python benchmarks/test_suite.py --only fast-cold,fast --repeat 3   # cold and warm, interleaved
    .venv/bin/python benchmarks/test_suite.py --pages   # README.md and docs/benchmarks.md from the record
    .venv/bin/python benchmarks/test_suite.py --quick   # a smoke run: one small test file

`install` times the README's set-up step alone (a new virtual environment in a temporary
folder, `pip install -q -e '.[test]'`: what a fresh clone pays before its first test).
`--cold` runs each selection with the caches empty (JAX's persistent cache of the tests,
numba's cached kernels, and the migrated MLflow store new stores are copied from), as on a
fresh clone, then puts the caches back (a warm run after it is as warm as before), and keeps
the run as `fast-cold` / `full-cold` beside the warm one (`--only fast-cold` names one cold
selection); without it the record says whether the caches were warm (held entries) when the
run started. `--repeat N` runs the selections N times, in turn (`fast-cold,fast`: cold, warm,
cold, warm, ...: both meet the same load), and records each kind's median wall time with
its minimum and every run's time: one run of the fast subset moved by 10-20 s between
consecutive runs on this shared machine.

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
import contextlib
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import shutil
import statistics
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from benchmarks.machine import cpu_model
from fco_ray.runtime.files import write_file
from fco_ray.tracking.template import template_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FAST = ["-m", "not slow and not ray"]
RUNS = {"fast": FAST, "full": [], "install": None}
#: the compilation caches a fresh clone starts without (tests/conftest.py; fco_ray/ops/kernels.py)
JAX_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fco-ray-tests" / "jax"
#: the migrated MLflow store new stores are copied from (fco_ray/tracking/template.py)
MLFLOW_TEMPLATE = template_dir()
NUMBA_CACHES = ("*.nbi", "*.nbc")
MARK = "<!-- benchmarks/test_suite.py -->"
END = "<!-- /benchmarks/test_suite.py -->"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def numba_files() -> list[Path]:
    return [f for pattern in NUMBA_CACHES for f in (ROOT / "fco_ray").rglob(pattern)]


def caches() -> str:
    """`warm` if the JAX test cache and numba's kernel cache hold entries, `cold` if neither
    does, else which one is warm."""
    jax = JAX_CACHE.is_dir() and any(JAX_CACHE.iterdir())
    numba = bool(numba_files())
    return "warm" if jax and numba else "cold" if not (jax or numba) else \
        ("JAX warm, numba cold" if jax else "numba warm, JAX cold")


@contextlib.contextmanager
def cold_caches(aside: Path):
    """The run inside starts with the caches empty, as on a fresh clone: their files are moved
    into `aside`, and moved back afterwards over what the run wrote (numba's index and kernel
    files must stay a matching set). So a later warm run is as warm as before: emptied caches
    left the whole suite's programs to compile again after a cold fast run."""
    moved = []
    for folder in (JAX_CACHE, MLFLOW_TEMPLATE):
        if folder.is_dir():
            shutil.move(str(folder), str(aside / folder.name))
            moved.append((aside / folder.name, folder))
    for i, f in enumerate(numba_files()):
        shutil.move(str(f), str(aside / f"numba-{i}"))
        moved.append((aside / f"numba-{i}", f))
    try:
        yield
    finally:
        for held, home in moved:
            pairs = [(e, home / e.name) for e in held.iterdir()] if held.is_dir() else [(held, home)]
            home.parent.mkdir(parents=True, exist_ok=True)
            if held.is_dir():
                home.mkdir(exist_ok=True)
            for entry, target in pairs:
                if target.is_dir():
                    shutil.rmtree(target)
                shutil.move(str(entry), str(target))  # over the file the run wrote, if any


def install(work: Path) -> dict:
    """The README's set-up step in a new folder: venv + editable install with the test extra."""
    venv = work / "venv"
    before, start = load(), time.perf_counter()
    done = subprocess.run(f"{sys.executable} -m venv {venv} && {venv}/bin/pip install -q -e '.[test]'",
                          shell=True, cwd=ROOT, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, load()
    print(f"install: {wall:.0f} s, exit {done.returncode}, load {before} -> {after}", flush=True)
    return {"name": "install", "command": "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'",
            "exit_code": done.returncode, "wall_s": round(wall, 1), "passed": 0, "failed": 0,
            "skipped": 0, "failures": [] if done.returncode == 0 else [done.stderr[-2000:]],
            "load_before": before, "load_after": after, "caches": "-", "slowest": []}


def run(name: str, selection: list[str], work: Path, quick: bool) -> dict:
    if selection is None:
        return install(work)
    xml = work / f"{name}.xml"
    state = caches()
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
            why = case.find("failure") if case.find("failure") is not None else case.find("error")
            print(f"FAILED {test}:\n{(why.text or why.get('message', ''))[-3000:]}", flush=True)
    slowest.sort(reverse=True)
    shown = ".venv/bin/python -m pytest -q" + "".join(f' -m "{s}"' for s in selection[1::2])
    print(f"{name}: {wall:.0f} s, {counts}, load {before} -> {after}", flush=True)
    return {"name": name, "command": shown, "exit_code": done.returncode, "wall_s": round(wall, 1),
            **counts, "failures": failures, "load_before": before, "load_after": after, "caches": state,
            "slowest": [{"s": round(t, 1), "test": test} for t, test in slowest[:15]]}


def wall(r: dict) -> str:
    """The run's wall time; for repeated runs the median, the minimum and every run's."""
    walls = r.get("walls", [r["wall_s"]])
    if len(walls) == 1:
        return f"{r['wall_s']:.0f} s"
    return (f"{r['wall_s']:.0f} s (median of {len(walls)}; min {min(walls):.0f} s; runs "
            + ", ".join(f"{w:.0f}" for w in walls) + ")")


def combined(runs: list[dict]) -> dict:
    """One record of repeated runs of a kind: the median run's details (its slowest tests),
    `wall_s` the median wall time, `walls` every run's, the first start's load and the last
    end's; the counts and the exit code of the worst run."""
    by_wall = sorted(runs, key=lambda r: r["wall_s"])
    out = dict(by_wall[(len(runs) - 1) // 2])
    out.update(wall_s=round(statistics.median(r["wall_s"] for r in runs), 1),
               walls=[r["wall_s"] for r in runs], exit_code=max(r["exit_code"] for r in runs),
               date=runs[0]["date"], load_before=runs[0]["load_before"], load_after=runs[-1]["load_after"],
               failures=sorted({f for r in runs for f in r["failures"]}))
    for key in ("failed", "skipped"):
        out[key] = max(r[key] for r in runs)
    out["passed"] = min(r["passed"] for r in runs)
    return out


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} minutes" if seconds >= 120 else f"{seconds:.0f} s"


def loads(r: dict) -> str:
    return f"{r['load_before'][0]:.1f} at the start, {r['load_after'][0]:.1f} at the end"


def machine(r: dict) -> str:
    return f"{r.get('cpus', '?')} x {r.get('cpu', 'unknown CPU')}"


def page(record: dict) -> str:
    lines = [f"# The test suite, {record['date']}", "",
             f"Command: `{record['command']}` (commit {record['commit']}; load: the 1-minute "
             "load average before and after each run; caches: JAX's persistent cache of the "
             "tests and numba's cached kernels when the run started, cold as on a fresh clone).", "",
             "| run | started | commit | machine | command | tests passed / failed / skipped | caches | wall | load average |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append(f"| {r['name']} | {r['date']} | {r['commit']} | {machine(r)} | `{r['command']}` | "
                     f"{r['passed']} / {r['failed']} / {r['skipped']} | {r.get('caches', 'not recorded')} | "
                     f"{wall(r)} | {loads(r)} |")
    for r in record["runs"]:
        if not r["slowest"]:
            continue
        lines += ["", f"## The slowest tests of the {r['name']} run", "", "| s | test |", "|---|---|"]
        lines += [f"| {t['s']:.1f} | `{t['test']}` |" for t in r["slowest"]]
    return "\n".join(lines) + "\n"


def readme_sentence(record: dict) -> str:
    runs = {r["name"]: r for r in record["runs"]}
    full, fast = runs["full"], runs["fast"]
    text = (f"On {machine(full)} with {full.get('caches', 'not recorded')} caches: the whole suite "
            f"{minutes(full['wall_s'])} "
            f"({full['passed'] + full['failed']} tests), the fast subset {minutes(fast['wall_s'])}")
    if "fast-cold" in runs:
        text += f"; with cold caches (a fresh clone) {minutes(runs['fast-cold']['wall_s'])}"
    if "install" in runs:
        text += f", after an install of {minutes(runs['install']['wall_s'])}"
    return text + (". Machines of one kind differ several-fold "
                   "([timings](docs/benchmarks.md#the-test-suite)).")


def docs_section(record: dict) -> str:
    runs = {r["name"]: r for r in record["runs"]}
    full, fast = runs["full"], runs["fast"]
    return (f"On {machine(full)}, in two pytest-xdist workers (`-n 2`, set in pyproject.toml), "
            f"caches {full.get('caches', 'not recorded')}, the whole suite took "
            f"{full['wall_s']:.0f} s ({minutes(full['wall_s'])}) for "
            f"{full['passed']} passed and {full['skipped']} skipped tests, load average "
            f"{loads(full)}; the fast subset (`-m \"not slow and not ray\"`, whose XLA programs compile at "
            f"LLVM's level 0: `tests/conftest.py`) {fast['wall_s']:.0f} s "
            f"for {fast['passed']} passed and {fast['skipped']} skipped, load average {loads(fast)} "
            f"({full['date']}, commit {full['commit']}; the record and the slowest tests: "
            "`benchmarks/results/test_suite.md`, written by `benchmarks/test_suite.py`)."
            + (f" With cold caches, as on a fresh clone (`--cold`: JAX's test cache and numba's "
               f"kernels emptied), the fast subset took {runs['fast-cold']['wall_s']:.0f} s "
               f"({minutes(runs['fast-cold']['wall_s'])}), load average {loads(runs['fast-cold'])}."
               if "fast-cold" in runs else "")
            + (" Repeated runs (`--repeat`) give the median; their minimum and every run's time "
               "are in the record." if any(len(r.get("walls", ())) > 1 for r in runs.values()) else "")
            + (f" The README's install step took {runs['install']['wall_s']:.0f} s."
               if "install" in runs else ""))


def replace_marked(path: Path, text: str) -> None:
    old = path.read_text()
    start, end = old.index(MARK) + len(MARK), old.index(END)
    write_file(path, old[:start] + text + old[end:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="fast,full", help="comma-separated: fast, full, install; "
                    "fast-cold, full-cold: that selection with the caches empty")
    ap.add_argument("--out", default=None, help="default benchmarks/results/test_suite.md")
    ap.add_argument("--pages", action="store_true", help="write README.md and docs/benchmarks.md "
                    "from the record (no test run)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: tests/unit/test_prox.py as "
                    "each run, the record in a temporary directory unless --out names one")
    ap.add_argument("--cold", action="store_true", help="empty the JAX test cache and numba's kernel "
                    "cache before each run, as on a fresh clone")
    ap.add_argument("--repeat", type=int, default=1, help="run the selections N times in turn and "
                    "record each kind's median (default 1)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat: {args.repeat} is not a count of runs (1 or more)")
    results = Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else RESULTS
    out = Path(args.out) if args.out else results / "test_suite.md"
    if args.pages:
        record = json.loads(out.with_suffix(".json").read_text())
        replace_marked(ROOT / "README.md", "\n" + textwrap.fill(readme_sentence(record), 190) + "\n")
        replace_marked(ROOT / "docs" / "benchmarks.md", "\n" + textwrap.fill(docs_section(record), 92) + "\n")
        print(readme_sentence(record))
        return 0
    names = [n for n in args.only.split(",") if n]
    allowed = [*RUNS, *(f"{n}-cold" for n, sel in RUNS.items() if sel is not None)]
    if set(names) - set(allowed):
        ap.error(f"--only: {sorted(set(names) - set(allowed))} not in {allowed}")
    if args.cold:
        names = [f"{n}-cold" if RUNS[n] is not None else n for n in names]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    record = {"date": _dt.datetime.now().isoformat(timespec="minutes"), "commit": commit,
              "cpus": os.cpu_count(), "command": "python benchmarks/test_suite.py " + " ".join(sys.argv[1:]),
              "runs": []}
    done: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.repeat):
            for name in names:
                kind, cold = name.removesuffix("-cold"), name.endswith("-cold")
                started = _dt.datetime.now().isoformat(timespec="minutes")
                with cold_caches(Path(tempfile.mkdtemp(dir=work))) if cold else contextlib.nullcontext():
                    result = run(kind, RUNS[kind], Path(work), args.quick)
                result["name"] = name  # a cold run is kept beside the warm run of its kind
                done.setdefault(name, []).append({"date": started, "commit": commit, "cpus": os.cpu_count(),
                                                  "cpu": cpu_model(), **result})
    record["runs"] = [combined(runs) for runs in done.values()]
    if out.with_suffix(".json").is_file():  # the latest run of each kind is kept
        kept = json.loads(out.with_suffix(".json").read_text())["runs"]
        made = {r["name"] for r in record["runs"]}
        record["runs"] = [r for r in kept if r["name"] not in made] + record["runs"]
        record["runs"].sort(key=lambda r: (list(RUNS).index(r["name"].removesuffix("-cold")), r["name"]))
    write_file(out.with_suffix(".json"), json.dumps(record, indent=1) + "\n")
    write_file(out, page(record))
    print(f"wrote {out}")
    return 0 if all(r["exit_code"] == 0 for r in record["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
