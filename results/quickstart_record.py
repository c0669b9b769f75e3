"""Record the quick start as a user runs it: `fco-ray sweep sweeps/quickstart.yaml` in a fresh
folder, its terminal output, its wall time and the machine's load, and every run's final values.

    python results/quickstart_record.py      # writes results/quickstart_output.txt,
                                             # results/quickstart_trials.csv, results/quickstart_run.json
                                             # and, with Chromium, docs/images/mlflow_ui_quickstart.png
    python results/quickstart_record.py --screenshot-only   # the picture alone (the records kept)

The README's quick-start time and output, sweeps/quickstart.yaml's time and the quick-start
paragraph of docs/results.md are written from these files by results/generate.py.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "results"
COLUMNS = ["algorithm", "algorithm.client_lr", "algorithm.server_lr", "seed", "status", "final_round",
           "f1", "density", "precision", "recall", "val_mse", "train_loss", "mean.f1"]


def main(records: bool = True) -> None:
    fco = shutil.which("fco-ray") or str(Path(sys.executable).parent / "fco-ray")
    with tempfile.TemporaryDirectory(prefix="fco-quickstart-") as folder:
        shutil.copytree(ROOT / "sweeps", Path(folder) / "sweeps")
        # as on a fresh machine: numba compiles the kernels on the way (an empty cache) and
        # the commands it prints are found on PATH (the venv's bin, as after `activate`)
        cache = Path(folder) / "numba-cache"
        cache.mkdir(mode=0o700)
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        load_before = os.getloadavg()
        start = time.monotonic()
        done = subprocess.run([fco, "sweep", "sweeps/quickstart.yaml"], cwd=folder, text=True, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wall = time.monotonic() - start
        load_after = os.getloadavg()
        output = done.stdout.replace(folder, "/path/to/your/folder")
        if done.returncode != 0 or not records:
            if done.returncode != 0:
                sys.exit(f"fco-ray sweep failed ({done.returncode}):\n{output[-3000:]}")
            screenshot(fco, folder, env)
            return
        write_file(OUT / "quickstart_output.txt", output)
        from fco_ray.report.data import load_sweep

        trials = load_sweep("quickstart", f"sqlite:///{folder}/mlflow.db").trials
        columns = [c for c in COLUMNS if c in trials]
        write_file(OUT / "quickstart_trials.csv", trials[columns].sort_values(
            ["algorithm", "algorithm.client_lr", "algorithm.server_lr"],
            ascending=[True, False, False]).to_csv(index=False, float_format="%.6g"))
        screenshot(fco, folder, env)
    record = {"command": "fco-ray sweep sweeps/quickstart.yaml", "wall_seconds": round(wall, 1),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in load_after],
              "cpus": os.cpu_count(), "numba_cache": "empty (the kernels compiled on the way)", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    write_file(OUT / "quickstart_run.json", json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


SCREENSHOT = ROOT / "docs" / "images" / "mlflow_ui_quickstart.png"


def screenshot(fco: str, folder: str, env: dict) -> None:
    """The link `fco-ray ui quickstart` prints (the quick start's trials in the MLflow UI, the
    verdict's winner first), in headless Chromium: SCREENSHOT, the README's picture. Without
    Chromium (Debian's `chromium`) the picture is left as it is, with a note."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print(f"no chromium on PATH: {SCREENSHOT.relative_to(ROOT)} not retaken", file=sys.stderr)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ui = subprocess.Popen([fco, "ui", "quickstart", "--port", str(port)], cwd=folder, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        link = None
        for line in ui.stdout:  # "starting ...", then "the MLflow UI answers ...; open:", the link
            found = re.search(rf"http://127\.0\.0\.1:{port}/\S+", line)
            if found and line.startswith("  "):
                link = found.group(0)
                break
        if link is None:
            sys.exit(f"fco-ray ui quickstart printed no link (exit {ui.wait()})")
        with tempfile.TemporaryDirectory(prefix="fco-chromium-") as profile:
            shot = Path(profile) / "shot.png"
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={profile}", "--virtual-time-budget=90000", "--window-size=1600,1200",
                            f"--screenshot={shot}", link], check=True, capture_output=True, timeout=300)
            write_file(SCREENSHOT, shot.read_bytes())
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()


if __name__ == "__main__":
    main(records="--screenshot-only" not in sys.argv[1:])
