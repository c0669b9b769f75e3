"""`backend.device: auto` (the default) against `device: cpu` (the NumPy/numba engine) on lone
runs of the shipped sweep files' settings: what a user's `fco_ray.run` of one configuration
costs, whole (problem built, JAX imported and compiling where auto picks it, every round and
evaluation), and which engine auto picked (fco_ray/backends/choice.py).

    python benchmarks/auto_engine.py --out benchmarks/results     # ~4 minutes idle, 2 cores
    python benchmarks/auto_engine.py --quick                      # a smoke run (seconds)

Each case runs in a fresh process per engine (JAX's start and compilation counted, as a user
pays them), the two engines one after the other, `--repeats` times; reported: min and median
wall seconds, the load average before and after, and the device auto picked. Writes
auto_engine.json and auto_engine.md under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
#: case -> (sweep file, the algorithm of it that runs, rounds (None: the file's))
CASES = {"E1 lasso, FedDualAvg": ("e1_lasso.yaml", "feddualavg", 500),
         "E5 l1, K = 10, FeDualEx": ("e5_l1_k10.yaml", "feddualex", None),
         "E5 nuclear, K = 10, FeDualEx": ("e5_nuclear_k10.yaml", "feddualex", None),
         "E6 adversarial, FeDualEx": ("e6_adversarial.yaml", "feddualex", None)}
QUICK = {"E5 l1, tiny": ({"name": "bilinear_l1", "n": 20, "m": 30, "clients": 4, "data_seed": 0},
                         {"name": "feddualex", "local_steps": 2, "clients_per_round": None, "client_lr": 0.1}, 6, 2)}
PROBE = """
import json, sys, time
t = time.perf_counter()
import fco_ray
df = fco_ray.run(json.loads(sys.argv[1]))
print("PROBE " + json.dumps({"seconds": time.perf_counter() - t, "device": df.attrs["backend"]["device"],
                             "status": df.attrs["status"], "rows": len(df)}))
"""


def config_of(name: str) -> dict:
    """A lone run of the case's sweep file: its problem, the algorithm's fixed settings, a
    client rate from the middle of its grid (server rate 1 where searched)."""
    if name in QUICK:
        problem, algorithm, rounds, every = QUICK[name]
        return {"problem": problem, "algorithm": algorithm, "rounds": rounds, "eval_every": every, "seed": 0}
    file, algorithm, rounds = CASES[name]
    sweep = yaml.safe_load((ROOT / "sweeps" / file).read_text())
    grid = sweep.get("search", {}).get("grid", {})
    rates = grid.get("algorithm.client_lr") or [0.01]
    alg = {**sweep.get("algorithm", {}), "name": algorithm, "client_lr": rates[len(rates) // 2]}
    if "algorithm.server_lr" in grid:
        alg["server_lr"] = 1.0
    return {"problem": sweep["problem"], "algorithm": alg, "rounds": rounds or sweep["rounds"],
            "eval_every": sweep["eval_every"], "seed": 0}


def probe(cfg: dict, device: str) -> dict:
    run = {**cfg, "backend": {"name": "local", "device": device}}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(run)], env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{device} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.split("PROBE ", 1)[1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the record (--quick: a temporary one)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a tiny problem, seconds: a smoke run")
    args = ap.parse_args(argv)
    if args.out is None:
        if not args.quick:
            ap.error("--out is required (or --quick)")
        args.out = Path(tempfile.mkdtemp(prefix="fco-bench-"))
    command = "python benchmarks/auto_engine.py" + (" --quick" if args.quick else "") + \
        (f" --repeats {args.repeats}" if args.repeats != 1 else "") + f" --out {args.out}"
    rows = []
    for name in (QUICK if args.quick else CASES):
        cfg = config_of(name)
        runs: dict[str, list[dict]] = {"auto": [], "cpu": []}
        load_before = os.getloadavg()[0]
        for _ in range(args.repeats):
            for device in runs:
                runs[device].append(probe(cfg, device))
        row = {"case": name, "rounds": cfg["rounds"], "eval_every": cfg["eval_every"],
               "auto_picked": runs["auto"][0]["device"], "load_before": load_before,
               "load_after": os.getloadavg()[0]}
        for device, got in runs.items():
            seconds = [r["seconds"] for r in got]
            row[f"{device}_min_s"], row[f"{device}_median_s"] = min(seconds), float(np.median(seconds))
            row[f"{device}_status"] = got[0]["status"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_file(args.out / "auto_engine.json", json.dumps({"command": command, "cores": os.cpu_count(),
                                                          "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
    lines = ["# `device: auto` against `device: cpu`, lone runs", "",
             f"Written by `{command}` ({os.cpu_count()} cores): wall seconds of `fco_ray.run` of one "
             "configuration in a fresh process (problem, JAX's start and compilation included), "
             f"min and median over {args.repeats} run(s); the 1-minute load before and after.", "",
             "| case | rounds (every) | auto picked | auto s (min / median) | cpu s (min / median) | cpu / auto | load |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['rounds']} ({r['eval_every']}) | {r['auto_picked']} | "
                     f"{r['auto_min_s']:.1f} / {r['auto_median_s']:.1f} | {r['cpu_min_s']:.1f} / "
                     f"{r['cpu_median_s']:.1f} | {r['cpu_median_s'] / r['auto_median_s']:.2f}x | "
                     f"{r['load_before']:.2f} / {r['load_after']:.2f} |")
    write_file(args.out / "auto_engine.md", "\n".join(lines) + "\n")
    print(f"wrote {args.out / 'auto_engine.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
