"""Where the test suite's time goes: JAX's compilation per test file and phase, and collection.

    .venv/bin/python benchmarks/suite_profile.py [--out benchmarks/results/suite_profile.md]
    .venv/bin/python benchmarks/suite_profile.py --quick   # one small test file, record in a temporary directory

Runs the README's fast subset (`-m "not slow and not ray"`, pytest's two workers as configured)
with the plugin `benchmarks/jit_events.py`, which adds up `jax.monitoring`'s events per test:
tracing, lowering to MLIR, the backend's compilation (or the persistent cache's read) and the
compile time the cache saved, as JAX accounts it (less than an emptied cache costs: run it with
JAX_COMPILATION_CACHE_DIR set to an empty folder to measure that). Then times one worker's
collection alone (`--collect-only -n 0`). The record (`suite_profile.json`) holds the totals,
each test file's wall and compilation seconds and the compiled functions that cost most; the
page (`suite_profile.md`) the same, with the command, commit, CPU and load.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.record import ROOT, header, load, options, write

FAST = ["-m", "not slow and not ray"]
QUICK = ["tests/unit/test_linear_problems.py"]
#: the phases that are compilation work in this process (the saved time is what a cold cache adds)
WORK = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")
NAMES = {"jaxpr_trace_duration": "tracing", "jaxpr_to_mlir_module_duration": "lowering",
         "backend_compile_duration": "compiling or reading the cache",
         "cache_retrieval_time_sec": "of which reading the cache",
         "compile_time_saved_sec": "compile time the cache saved, as JAX accounts it"}


def profile(selection: list[str], work: Path) -> dict:
    env = {**os.environ, "FCO_JIT_EVENTS": str(work)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "benchmarks.jit_events", "-p", "no:cacheprovider",
           *selection]
    before, start = load(), time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, load()
    if done.returncode != 0:  # recorded with its summary line: the profile still says where time went
        print(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout[-3000:]}", file=sys.stderr)
    phases, files, wall_by_file, functions = (collections.Counter(), collections.defaultdict(collections.Counter),
                                              collections.Counter(), collections.Counter())
    counts = collections.Counter()
    for path in work.glob("jit-*.json"):
        record = json.loads(path.read_text())
        for test, seconds in record["per_test"].items():
            for phase, s in seconds.items():
                phases[phase] += s
                files[test.split("::")[0]][phase] += s
        for test, s in record["wall"].items():
            wall_by_file[test.split("::")[0]] += s
        counts.update(record["count"])
        functions.update(record["per_function"])
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    shown = " ".join(f'"{a}"' if " " in a else a for a in selection)
    return {"command": f"pytest -q {shown}",
            "wall_s": round(wall, 1), "exit_code": done.returncode, "summary": summary, "load_before": before, "load_after": after,
            "phases": {k: round(v, 1) for k, v in phases.items()}, "counts": dict(counts),
            "test_seconds": round(sum(wall_by_file.values()), 1),
            "files": sorted(({"file": f, "wall_s": round(wall_by_file[f], 1),
                              "compile_s": round(sum(files[f][p] for p in WORK), 1)} for f in wall_by_file),
                            key=lambda r: -r["compile_s"]),
            "functions": [{"what": k, "s": round(v, 1)} for k, v in functions.most_common(12)]}


def collection(selection: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-n", "0", "-p", "no:cacheprovider",
                    *selection], cwd=ROOT, capture_output=True, text=True, check=True)
    return round(time.perf_counter() - start, 1)


def page(r: dict) -> str:
    p = r["profile"]
    compile_s = sum(p["phases"].get(k, 0.0) for k in WORK)
    lines = [f"# Where the test suite's time goes, {r['date']}", "",
             f"Written by `{r['command']}` (commit {r['commit']}, {r['cpus']} x {r['cpu']}, caches warm as "
             f"they were; load average {p['load_before'][0]:g} before, {p['load_after'][0]:g} after).", "",
             f"`{p['command']}`: {p['wall_s']:.0f} s of wall time ({p['summary']}); the tests' own time "
             f"{p['test_seconds']:.0f} s summed over the workers, of which JAX's compilation {compile_s:.0f} s "
             f"({100 * compile_s / max(p['test_seconds'], 1e-9):.0f}%). One worker's collection alone "
             f"(`pytest --collect-only -n 0`, the same selection): {r['collection_s']:.1f} s.", "",
             "| JAX's compilation, phase | seconds | events |", "|---|---|---|"]
    for phase, name in NAMES.items():
        lines.append(f"| {name} | {p['phases'].get(phase, 0.0):.1f} | {p['counts'].get(phase, 0)} |")
    lines += ["", "| test file | wall s | compiling s |", "|---|---|---|"]
    lines += [f"| `{f['file']}` | {f['wall_s']:.1f} | {f['compile_s']:.1f} |" for f in p["files"][:15]]
    lines += ["", "| compiled function, phase | seconds |", "|---|---|"]
    lines += [f"| `{f['what']}` | {f['s']:.1f} |" for f in p["functions"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = options(__doc__, "suite_profile", None, "one small test file in one process")
    selection = [*QUICK, "-n", "0"] if args.quick else FAST
    with tempfile.TemporaryDirectory() as work:
        measured = profile(selection, Path(work))
    record = {**header(args.command), "profile": measured, "collection_s": collection(selection)}
    write(args.out, record, page(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
