"""Where the whole test suite's CPU time goes, by kind of process: the pytest workers (the tests
that run in-process), Ray's client actors and Tune's trials, Ray's own daemons, MLflow's
servers, Chromium, and the commands and scripts the tests start.

    .venv/bin/python benchmarks/suite_processes.py [--out benchmarks/results/suite_processes.md]
    .venv/bin/python benchmarks/suite_processes.py --quick   # one small test file in one process; the record in a temporary directory

Runs the README's test command (`pytest -q`: the whole suite, pytest's two workers as configured)
while a thread reads every process's CPU time (user + system, `/proc/PID/stat`) and command
line every half second. A process counts with the CPU time it used while the suite ran, under
the kind its last command line names (Ray renames its workers `ray::ShardWorker`,
`ray::ImplicitFunc`, ...). Processes that live less than half a second, and the last half
second of each process, are missed: the page gives the sampled total beside the machine's busy
CPU time (`/proc/stat`). The record (`suite_processes.json`) holds each kind's CPU seconds and
process count, the number of Ray clusters started (GCS servers), the run's wall time, pytest's
summary line, the load and the CPU; the page (`suite_processes.md`) the same.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.record import ROOT, header, load, options, write

QUICK = ["tests/unit/test_linear_problems.py", "-n", "0"]
TICK = os.sysconf("SC_CLK_TCK")
#: (kind, substrings of the command line), the first that matches names the kind
KINDS = [
    ("Ray client actors (ray::ShardWorker)", ("ray::ShardWorker",)),
    ("Tune trials (ray::ImplicitFunc)", ("ray::ImplicitFunc",)),
    ("Ray's daemons (GCS, raylet, agents, dashboard, monitors, the ray CLI)",
     ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "gcs_server", "/raylet", "dashboard/", "log_monitor.py",
      "autoscaler/_private/monitor.py", "runtime_env/agent", "bin/ray ", "ray.util.client.server", "tests.cluster_process")),
    ("other Ray workers (idle, jobs, tasks)", ("ray::", "default_worker.py", "setup_worker.py")),
    ("MLflow servers", ("mlflow ui", "mlflow server", "mlflow.server", "gunicorn", "uvicorn", "huey")),
    ("Chromium", ("chromium", "chrome")),
    ("fco-ray commands", ("bin/fco-ray", "-m fco_ray", "cli.py ")),
    ("benchmark and results scripts", ("/benchmarks/", "/results/")),
    ("pytest runs inside tests", ("-m pytest",)),
    ("pytest workers (the tests that run in-process)", ("exec(eval(sys.stdin.readline()))",)),
]


def busy() -> tuple[float, float]:
    """The machine's (busy, idle) CPU seconds since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK, (v[3] + v[4]) / TICK


class Sampler(threading.Thread):
    """Every process's CPU seconds while it runs: {(pid, start time): [cpu at first sight or 0,
    latest cpu, latest non-empty command line]}; processes alive at the start count from then."""

    def __init__(self, period: float = 0.5):
        super().__init__(daemon=True)
        self.period, self.seen, self.done = period, {}, threading.Event()

    def sample(self, first: bool) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rindex(")") + 2:].split()
                cpu = (int(fields[11]) + int(fields[12])) / TICK
                key = (name, fields[19])
                entry = self.seen.get(key)
                if entry is not None and entry[1] == cpu:
                    continue
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                command = command or f"[{stat[stat.index('(') + 1:stat.rindex(')')]}]"
                if entry is None:
                    self.seen[key] = [cpu if first else 0.0, cpu, command]
                else:
                    entry[1], entry[2] = cpu, command if not command.startswith("[") else entry[2]
            except (OSError, ValueError, IndexError):  # the process ended meanwhile
                continue

    def run(self) -> None:
        self.sample(first=True)
        while not self.done.wait(self.period):
            self.sample(first=False)
        self.sample(first=False)

    def processes(self) -> list[tuple[int, float, str]]:
        """(pid, CPU seconds while sampled, command line) of every process seen."""
        return [(int(pid), last - base, command) for (pid, _), (base, last, command) in self.seen.items()]


def kind(command: str) -> str:
    for name, marks in KINDS:
        if any(m in command for m in marks):
            return name
    return "other (the system; this script's sampler not counted)"


def measure(selection: list[str]) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection]
    sampler, before, (busy0, idle0) = Sampler(), load(), busy()
    sampler.start()
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:  # (the whole suite's output: not held in memory)
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        proc.wait()  # (Popen, not run: its pid tells the controller apart from the workers)
        out.seek(0)
        lines = out.read().strip().splitlines()
    wall = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    busy1, idle1 = busy()
    kinds: dict[str, dict] = {}
    for pid, cpu, command in sampler.processes():
        k = "the pytest command (xdist's controller; with -n 0 it runs the tests)" if pid == proc.pid else kind(command)
        entry = kinds.setdefault(k, {"kind": k, "cpu_s": 0.0, "processes": 0})
        entry["cpu_s"] += cpu
        entry["processes"] += cpu > 0
    clusters = sum(1 for _, _, command in sampler.processes() if "gcs_server" in command)
    shown = " ".join(f'"{a}"' if " " in a else a for a in selection)
    return {"command": f"pytest -q {shown}".strip(), "exit_code": proc.returncode, "summary": lines[-1] if lines else "",
            "wall_s": round(wall, 1), "busy_cpu_s": round(busy1 - busy0, 1), "idle_cpu_s": round(idle1 - idle0, 1),
            "load_before": before, "load_after": load(), "ray_clusters": clusters,
            "kinds": sorted(({**v, "cpu_s": round(v["cpu_s"], 1)} for v in kinds.values() if v["cpu_s"] > 0),
                            key=lambda v: -v["cpu_s"])}


def page(r: dict) -> str:
    m = r["measured"]
    sampled = sum(k["cpu_s"] for k in m["kinds"])
    lines = [f"# Where the whole test suite's CPU time goes, {r['date']}", "",
             f"Written by `{r['command']}` (commit {r['commit']}, {r['cpus']} x {r['cpu']}, caches warm as they were; "
             f"load average {m['load_before'][0]:g} before, {m['load_after'][0]:g} after).", "",
             f"`{m['command']}`: {m['wall_s']:.0f} s of wall time ({m['summary']}; exit code {m['exit_code']}). "
             f"The machine was busy for {m['busy_cpu_s']:.0f} CPU-seconds and idle for {m['idle_cpu_s']:.0f}; "
             f"the processes sampled account for {sampled:.0f} CPU-seconds. Ray clusters started (GCS servers): "
             f"{m['ray_clusters']}.", "",
             "| kind of process | CPU s | share of the busy time | processes | CPU s per process |",
             "|---|---|---|---|---|"]
    for k in m["kinds"]:
        lines.append(f"| {k['kind']} | {k['cpu_s']:.1f} | {100 * k['cpu_s'] / max(m['busy_cpu_s'], 1e-9):.0f}% | "
                     f"{k['processes']} | {k['cpu_s'] / max(k['processes'], 1):.1f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    args = options(__doc__, "suite_processes", None, "one small test file in one process")
    measured = measure(QUICK if args.quick else [])
    record = {**header(args.command), "measured": measured}
    write(args.out, record, page(record))
    return 0 if measured["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
