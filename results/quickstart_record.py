"""Record the quick start as a user runs it: `fco-ray sweep sweeps/quickstart.yaml` in a fresh
folder, its terminal output, its wall time and the machine's load, and every run's final values.

    python results/quickstart_record.py      # writes results/quickstart_output.txt,
                                             # results/quickstart_trials.csv, results/quickstart_run.json

The README's quick-start time and output, sweeps/quickstart.yaml's time and the quick-start
paragraph of docs/results.md are written from these files by results/generate.py.
"""
from __future__ import annotations

import json
import os
import shutil
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


def main() -> None:
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
        write_file(OUT / "quickstart_output.txt", output)
        if done.returncode != 0:
            sys.exit(f"fco-ray sweep failed ({done.returncode}); output in results/quickstart_output.txt")
        from fco_ray.report.data import load_sweep

        trials = load_sweep("quickstart", f"sqlite:///{folder}/mlflow.db").trials
        columns = [c for c in COLUMNS if c in trials]
        write_file(OUT / "quickstart_trials.csv", trials[columns].sort_values(
            ["algorithm", "algorithm.client_lr", "algorithm.server_lr"],
            ascending=[True, False, False]).to_csv(index=False, float_format="%.6g"))
    record = {"command": "fco-ray sweep sweeps/quickstart.yaml", "wall_seconds": round(wall, 1),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in load_after],
              "cpus": os.cpu_count(), "numba_cache": "empty (the kernels compiled on the way)", "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    write_file(OUT / "quickstart_run.json", json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
