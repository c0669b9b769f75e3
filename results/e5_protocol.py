"""The FeDualEx paper's E5 protocol (Bai & Bullins, ICLR'24, Figs. 4 and 5) as fused groups on
the device, in the groups `fco-ray sweep` forms from the shipped files sweeps/e5_{l1,nuclear}_k{1,10}.yaml
with `backend: {name: local, device: cuda}`: there the data is fixed across seeds (data_seed 0),
so a method's whole rate grid x its 10 seeds is one group (350 configurations for l1, 450 for
nuclear), run by the engine directly (`fco_ray.core.plan.prepare`; no Ray, no MLflow).

    python results/e5_protocol.py --problem l1 --out e5-l1                # 10 seeds, K 1 and 10
    python results/e5_protocol.py --problem nuclear --out e5-nuc --time-limit 900
    python results/e5_protocol.py --problem l1 --out /tmp/q --quick --device jax-cpu  # smoke run

The settings are the sweep files': A 300 x 600 fixed for all seeds
(data_seed 0), lam 0.1, D 0.05, 100 clients, full participation, noise 0.1; l1: 4000 rounds at
K = 1 (metrics every 40), 400 at K = 10 (every 4); nuclear: 100 and 20 rounds (every round).
Grids: eta_s in {1, .3, .1, .03, .01} x eta_c in {1, .3, .1, .03, .01, .003, .001} (nuclear also
eta_c in {10, 3}). Methods: feddualex, fedmip (Appendix H, server prox), feddualavg, fedmid,
extragrad_local_sgd; `fedmip_noprox` (FedMiP without the server prox: not the paper's
Algorithm 2, whose line 11 applies the server prox, but the variant that gives the gap and
density the paper reports for FedMiP, results/e5_full_scale.md) may be added with --methods.

Output under --out: `<problem>_trials.csv`, one row per configuration (final and best
duality gap of the server model and of the ergodic output, densities, ranks), appended after
every finished group, so a time-limited or interrupted run keeps what it did and a rerun with
the same --out skips the groups already there (a chunk: one group, its time in
`group_seconds`); `<problem>_summary.md`: per K and method the
rate pair that is best by the mean over seeds of the final gap (by the server model, and by
the ergodic output), with mean +- std over seeds, from the whole CSV. `--time-limit` stops
before a group that would not finish in time (estimated from the last group of the same K).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from fco_ray.runtime.files import append_file, write_file


METHODS = ["feddualex", "fedmip", "feddualavg", "fedmid", "extragrad_local_sgd"]
FIELDS = ["problem", "K", "method", "seed", "client_lr", "server_lr", "status", "final_round",
          "gap", "best_gap", "gap_ergodic", "best_gap_ergodic", "density", "density_ergodic",
          "rank", "rank_ergodic", "group_seconds", "device"]


def seeds_of(text: str) -> list[int]:
    """'0-9' or '0,3,5'."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",") if s]


ROOT = Path(__file__).resolve().parents[1]


def protocol_configs(problem: str, k: int, method: str, seeds: list[int], device: str, quick: bool) -> list:
    """The configurations of `method` in sweeps/e5_<problem>_k<k>.yaml (its grid x `seeds`), as
    `fco-ray sweep` expands them, on `device`; `--quick`: a tiny problem and 3 rounds."""
    from fco_ray.core.config import parse_run
    from fco_ray.runtime.files import load_yaml

    sweep = load_yaml(ROOT / "sweeps" / f"e5_{problem}_k{k}.yaml")
    prob = dict(sweep["problem"])
    if quick:
        prob |= {"n": 30, "m": 60, "clients": 10} | ({"p": 6, "rank": 3} if problem == "nuclear" else {})
    alg = {**sweep["algorithm"], "name": "fedmip" if method == "fedmip_noprox" else method}
    if method == "fedmip_noprox":
        alg["server_prox"] = False
    grid = sweep["search"]["grid"]
    rounds, every = (3, 1) if quick else (sweep["rounds"], sweep["eval_every"])
    out = []
    for seed in seeds:
        for clr in grid["algorithm.client_lr"]:
            for slr in grid["algorithm.server_lr"]:
                out.append(parse_run({"problem": prob, "algorithm": {**alg, "client_lr": clr, "server_lr": slr},
                                      "rounds": rounds, "eval_every": every, "seed": seed,
                                      "backend": {"name": "local", "device": device}}))
    return out


def rows_of(configs, results, problem: str, k: int, method: str, seconds: float, device: str) -> list[dict]:
    out = []
    for cfg, result in zip(configs, results):
        records = result.records
        last = records[-1]
        row = {"problem": problem, "K": k, "method": method, "seed": cfg.seed,
               "client_lr": cfg.algorithm.client_lr, "server_lr": cfg.algorithm.server_lr,
               "status": result.status, "final_round": int(last["round"]),
               "gap": last["duality_gap"], "best_gap": min(r["duality_gap"] for r in records),
               "density": last["density"], "group_seconds": round(seconds, 2), "device": device}
        if "duality_gap_ergodic" in last:
            row |= {"gap_ergodic": last["duality_gap_ergodic"],
                    "best_gap_ergodic": min(r["duality_gap_ergodic"] for r in records),
                    "density_ergodic": last.get("density_ergodic")}
        if "rank" in last:
            row |= {"rank": last["rank"], "rank_ergodic": last.get("rank_ergodic")}
        out.append(row)
    return out


def summary(csv_path: Path, problem: str) -> str:
    import pandas as pd

    df = pd.read_csv(csv_path)
    for col in ("gap", "gap_ergodic"):  # a diverged configuration ranks last
        if col in df:
            df.loc[df["status"] == "diverged", col] = np.inf
    lines = [f"# E5 {problem}: best rate pair per K and method (mean +- std over seeds of the final gap)", "",
             f"From `{csv_path.name}` ({len(df)} configurations). A pair is chosen by the mean over "
             "the seeds it has of the final duality gap of the server model (left) or of the "
             "ergodic output (right; extra-step methods).", "",
             "| K | method | seeds | pair (eta_c, eta_s) by server gap | server gap | density | rank "
             "| pair by ergodic gap | ergodic gap | density (ergodic) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    extra = {"gap": ("density", "rank"), "gap_ergodic": ("density_ergodic",)}
    for (k, method), part in df.groupby(["K", "method"], sort=True):
        cells = []
        for col in ("gap", "gap_ergodic"):
            width = 2 + len(extra[col])
            if col not in part or part[col].isna().all():
                cells += [""] * width
                continue
            pairs = part.groupby(["client_lr", "server_lr"])
            stats = pairs[col].agg(["mean", "std", "count"])
            stats = stats[np.isfinite(stats["mean"])]  # pairs where some seed diverged: out
            if stats.empty:
                cells += ["none finite"] + [""] * (width - 1)
                continue
            (clr, slr), best = stats["mean"].idxmin(), stats.loc[stats["mean"].idxmin()]
            cells += [f"({clr:g}, {slr:g})", f"{best['mean']:.4g} +- {0 if np.isnan(best['std']) else best['std']:.2g} (n={int(best['count'])})"]
            for name in extra[col]:  # the chosen pair's mean over seeds
                value = pairs[name].mean().get((clr, slr)) if name in part else None
                cells.append("" if value is None or np.isnan(value) else f"{value:.3g}")
        lines.append(f"| {k} | {method} | {part['seed'].nunique()} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", choices=["l1", "nuclear"], default=None, help="required but with --quick (l1)")
    ap.add_argument("--out", default=None, help="required but with --quick (a temporary directory)")
    ap.add_argument("--seeds", default=None, help="'0-9' (default; with --quick '0') or '0,1,2'")
    ap.add_argument("--ks", default="10,1", help="local steps, in this order (default 10,1)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated (default {','.join(METHODS)}; also fedmip_noprox)")
    ap.add_argument("--device", default=None, choices=["cuda", "jax-cpu", "cpu"],
                    help="default cuda; with --quick, jax-cpu")
    ap.add_argument("--time-limit", type=float, default=float("inf"), help="seconds for the whole run")
    ap.add_argument("--quick", action="store_true", help="a tiny problem and 3 rounds: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.problem = args.problem or "l1"
        args.out = args.out or tempfile.mkdtemp(prefix="fco-bench-")
    args.device = args.device or ("jax-cpu" if args.quick else "cuda")
    args.seeds = args.seeds or ("0" if args.quick else "0-9")
    if args.problem is None or args.out is None:
        ap.error("--problem and --out are required (or --quick)")
    from fco_ray.core.plan import groups, prepare

    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / f"{args.problem}_trials.csv"
    done = set()
    if csv_path.exists():
        with csv_path.open() as f:
            done = {(int(r["K"]), r["method"], int(r["seed"])) for r in csv.DictReader(f)}
    last_time: dict[int, float] = {}
    ran = skipped = 0
    for k in [int(v) for v in args.ks.split(",")]:
        for method in args.methods.split(","):
            configs = protocol_configs(args.problem, k, method, seeds_of(args.seeds), args.device, args.quick)
            configs = [c for c in configs if (k, method, c.seed) not in done]
            for members in groups(configs):  # as `fco-ray sweep` forms its trials
                chosen = [configs[i] for i in members]
                elapsed = time.perf_counter() - t0
                if elapsed + last_time.get(k, 0.0) > args.time_limit:
                    skipped += 1
                    continue
                t = time.perf_counter()
                prepared = prepare(chosen)
                results = prepared.run()
                seconds = time.perf_counter() - t
                last_time[k] = seconds
                rows = rows_of(chosen, results, args.problem, k, method, seconds, args.device)
                new = not csv_path.exists()
                text = io.StringIO(newline="")
                writer = csv.DictWriter(text, fieldnames=FIELDS)
                if new:
                    writer.writeheader()
                writer.writerows(rows)
                append_file(csv_path, text.getvalue())
                ran += 1
                best = min((r["gap_ergodic"] if r.get("gap_ergodic") is not None else r["gap"]) for r in rows)
                print(json.dumps({"K": k, "method": method, "configurations": len(rows),
                                  "seeds": sorted({c.seed for c in chosen}), "seconds": round(seconds, 2),
                                  "best_final_gap": best, "elapsed": round(time.perf_counter() - t0, 1)}),
                      flush=True)
    if csv_path.exists():
        write_file(out / f"{args.problem}_summary.md", 
            summary(csv_path, args.problem)
            + f"\nThis invocation: `{' '.join(sys.argv)}`; {ran} groups run, {skipped} left for "
              f"the time limit, {time.perf_counter() - t0:.0f} s.\n")
        print((out / f"{args.problem}_summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
