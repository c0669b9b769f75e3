"""How long the MLflow UI takes to answer: the server `fco-ray ui` starts (`fco_ray.cli.ui_server`:
one web worker, no job runner) beside `mlflow ui` with MLflow's defaults, on one migrated SQLite
store, interleaved in one run.

    .venv/bin/python benchmarks/mlflow_ui.py [--repeats 5] [--out benchmarks/results/mlflow_ui.md]
    .venv/bin/python benchmarks/mlflow_ui.py --quick    # one repeat, record in a temporary directory

Each start is timed from the command until `GET /` answers; the server is then stopped with its
whole process group (MLflow's job consumers included), and the next start waits until none of
them is left. The record (`mlflow_ui.json`) holds each case's seconds, the load average before
and after, the CPU and the commit; the page (`mlflow_ui.md`) their minimum and median.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.record import header, interleaved_page, load, options, write
from fco_ray.cli import ui_server
from fco_ray.runtime.files import open_in_place

TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases(uri: str):
    """name -> f(port) -> (command, environment)."""

    def defaults(port):
        command, _ = ui_server(uri, port)
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"}
        return command[:command.index("--workers")], env

    return {"fco-ray ui (--workers 1, no job runner)": lambda port: ui_server(uri, port),
            "mlflow ui (MLflow's defaults)": defaults}


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def time_start(command: list[str], env: dict, port: int, log: Path) -> float:
    start = time.perf_counter()
    out = open_in_place(log, os.O_WRONLY | os.O_APPEND)  # the server's output, never through a link
    try:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    finally:
        os.close(out)
    try:
        while not answers(f"http://127.0.0.1:{port}/"):
            if server.poll() is not None:
                raise SystemExit(f"{command}: exited with {server.returncode} (log: {log})")
            if time.perf_counter() - start > TIMEOUT_S:
                raise SystemExit(f"{command}: no answer within {TIMEOUT_S} s (log: {log})")
            time.sleep(0.1)
        return time.perf_counter() - start
    finally:
        stop(server)


def stop(server: subprocess.Popen) -> None:
    """The server and every process of its group (web workers, job consumers), then a wait
    until none is left, so the next start has the CPUs to itself."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            break
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(server.pid):
            time.sleep(0.2)
        if not _group_alive(server.pid):
            break


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def page(record: dict) -> str:
    return interleaved_page(record, "The MLflow UI's start", "starts", "Seconds from the command until "
                            "`GET /` answers, on one migrated SQLite store.", "server", 1)


def main() -> int:
    args = options(__doc__, "mlflow_ui", 5, "one start of fco-ray's server")
    import mlflow
    from mlflow.tracking import MlflowClient

    repeats = args.repeats
    work = Path(tempfile.mkdtemp(prefix="fco-ui-"))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # the schema's migrations, before any timing
    chosen = cases(uri)
    if args.quick:
        chosen = dict(list(chosen.items())[:1])
    walls: dict[str, list[float]] = {name: [] for name in chosen}
    before = load()
    for _ in range(repeats):
        for name, make in chosen.items():
            port = free_port()
            command, env = make(port)
            walls[name].append(round(time_start(command, env, port, work / "server.log"), 2))
            print(f"{name}: {walls[name][-1]:.1f} s", flush=True)
    record = {**header(args.command),
              "mlflow": mlflow.__version__, "repeats": repeats, "load_before": before, "load_after": load(),
              "cases": walls}
    write(args.out, record, page(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
