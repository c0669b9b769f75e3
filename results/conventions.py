"""The E1 / E2 data conventions measured: the record behind docs/results.md's paragraphs
"E1 / E2 data and conventions" and "Client heterogeneity" (results/generate.py writes them).

    python results/conventions.py                # the record results/conventions.json (minutes)
    python results/conventions.py --quick        # tiny sizes, seconds; record in a temporary directory
    python results/conventions.py --out DIR      # the record in DIR

1. The lam scan: the centralized optimum (FISTA, `solve_centralized`) of E1 at each lam of
   LAM_SCAN["e1"] and each support, and of E2 at each lam and rank, on seeds 0-2, scored by
   the problem's own metrics (support F1 / rank against the truth).
2. The shift boundary: every algorithm of sweeps/e1_lasso.yaml with its settings (K, batch,
   clients per round, eval_every) at the client rates and shifts of SHIFT_GRIDS, both server
   rates, seeds 0-2, for SHIFT_ROUNDS rounds through `fco_ray.run_grid` (configurations that
   differ only in the rates run fused): which runs finished and which diverged, at which round.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from fco_ray import run_grid
from fco_ray.algorithms.solvers import solve_centralized
from fco_ray.api import resolve
from fco_ray.problems import build_problem
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "sweeps" / "e1_lasso.yaml"
SEEDS = [0, 1, 2]
#: lam values scanned, and the truths each is scanned at (the package defaults first)
LAM_SCAN = {"e1": {"lams": [0.03, 0.1], "key": "support", "values": [512, 64, 8]},
            "e2": {"lams": [0.2, 0.3], "key": "rank", "values": [16, 4, 1]}}
PROBLEMS = {"e1": {"name": "lasso"}, "e2": {"name": "lowrank"}}
SOLVER = {"tol": 1e-12, "max_iter": 50_000}
#: (client rates, shifts) run on every algorithm, both server rates, every seed
SHIFT_GRIDS = [([0.01], [0.1, 0.25, 0.3]), ([0.03], [0.0, 0.03, 0.1])]
SERVER_RATES = [1.0, 0.3]
SHIFT_ROUNDS = 500
#: --quick: the same steps on tiny problems
QUICK_SIZES = {"clients": 16, "samples_per_client": 16, "val_clients": 2}
QUICK = {"e1": {"dim": 32, "values": [16, 4, 1]}, "e2": {"dim": 8, "values": [4, 2, 1]},
         "seeds": [0], "rounds": 10}


def lam_scan(exp: str, quick: bool) -> dict:
    """Per (lam, truth, seed): the optimum's metrics (the problem's `metrics`); `truth` is the
    true support (E1) or rank (E2) the problem was built with, `key` names which."""
    scan = LAM_SCAN[exp]
    section = {**PROBLEMS[exp]}
    values = scan["values"]
    if quick:
        section.update(QUICK_SIZES, dim=QUICK[exp]["dim"])
        values = QUICK[exp]["values"]
    rows = []
    for value in values:
        for seed in QUICK["seeds"] if quick else SEEDS:
            cfg = resolve({"problem": {**section, scan["key"]: value}, "algorithm": {"name": "fedmid"}})
            built = build_problem(cfg.problem, seed)
            for lam in scan["lams"]:
                start = time.perf_counter()
                optimum = solve_centralized(built.with_lam(lam), **SOLVER)
                metrics = built.with_lam(lam).metrics(optimum)
                rows.append({"lam": lam, "truth": value, "seed": seed,
                             **{k: float(v) for k, v in metrics.items()},
                             "solve_s": round(time.perf_counter() - start, 2)})
                print(exp, rows[-1], flush=True)
    problem = resolve({"problem": {**section, scan["key"]: values[0]},
                       "algorithm": {"name": "fedmid"}}).problem.model_dump()
    return {"problem": problem, "key": scan["key"], "lams": scan["lams"], "values": values,
            "rows": rows}


def shift_boundary(quick: bool) -> dict:
    """Every algorithm of the E1 sweep file, at its settings, over SHIFT_GRIDS: one row per
    configuration with its status and its last evaluated round."""
    sweep = yaml.safe_load(SWEEP.read_text())
    rounds = QUICK["rounds"] if quick else SHIFT_ROUNDS
    problem = dict(sweep["problem"])
    if quick:
        problem.update(QUICK_SIZES, dim=QUICK["e1"]["dim"], support=QUICK["e1"]["values"][0])
    config = {"problem": problem, "algorithm": dict(sweep["algorithm"]), "rounds": rounds,
              "eval_every": min(sweep["eval_every"], rounds)}
    seeds = QUICK["seeds"] if quick else SEEDS
    rows = []
    for client_rates, shifts in SHIFT_GRIDS:
        start = time.perf_counter()
        grid = {"algorithm.name": sweep["algorithms"], "problem.shift": shifts, "seed": seeds,
                "algorithm.client_lr": client_rates, "algorithm.server_lr": SERVER_RATES}
        frame = run_grid(config, grid)
        keys = list(grid)
        for point, g in frame.groupby(keys, sort=False):
            last = g.iloc[-1]
            rows.append({**dict(zip(["algorithm", "shift", "seed", "client_lr", "server_lr"], point)),
                         "status": str(last["status"]), "last_round": int(last["round"]),
                         "f1": float(last["f1"])})
        print(f"client_lr {client_rates}, shifts {shifts}: {len(frame.groupby(keys))} configurations in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    for r in rows:
        print(r, flush=True)
    defaults = resolve({**config, "algorithm": {**config["algorithm"], "name": sweep["algorithms"][0]}})
    return {"config": config, "problem": defaults.problem.model_dump(), "algorithms": sweep["algorithms"],
            "sweep": str(SWEEP.relative_to(ROOT)),
            "server_rates": SERVER_RATES, "seeds": seeds, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny problems, one seed, 10 rounds: a smoke "
                    "run; the record in a temporary directory unless --out names one")
    ap.add_argument("--out", default=None, help="folder of the record conventions.json "
                    "(default results/)")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else (Path(tempfile.mkdtemp(prefix="fco-conventions-")) if args.quick
                                           else ROOT / "results")
    out.mkdir(parents=True, exist_ok=True)
    load_before = [round(x, 2) for x in os.getloadavg()]
    start = time.perf_counter()
    record = {"command": "python results/conventions.py" + (" --quick" if args.quick else ""),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip(),
              "date": _dt.datetime.now().isoformat(timespec="minutes"), "cpus": os.cpu_count(),
              "quick": args.quick, "solver": SOLVER,
              "lam_scan": {exp: lam_scan(exp, args.quick) for exp in LAM_SCAN}}
    record["lam_scan_s"] = round(time.perf_counter() - start, 1)
    record["shift"] = shift_boundary(args.quick)
    record["wall_s"] = round(time.perf_counter() - start, 1)
    record["load_before"], record["load_after"] = load_before, [round(x, 2) for x in os.getloadavg()]
    path = out / "conventions.json"
    write_file(path, json.dumps(record, indent=1) + "\n")
    print(f"wrote {path} ({record['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
