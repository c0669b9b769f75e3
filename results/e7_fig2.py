"""E7 / Fig. 2 at the paper's scale: the trials of sweeps/e7_fsvrg.yaml in one process.

    nice -n 10 .venv/bin/python results/e7_fig2.py [--sweep sweeps/e7_fsvrg.yaml]
        [--only fsvrg=100,300 gd=32,64 ...] [--twin 300] [--rounds N]
        [--out results/e7_fig2.jsonl] [--figures results] [--set problem.KEY=VALUE ...]

Runs what `fco-ray sweep sweeps/e7_fsvrg.yaml` runs (every algorithm of the sweep file at
every step size of its `algorithm.client_lr` grid, `rounds` rounds, evaluated every round;
`cocoa_plus` has no step size and runs once), but sequentially through `fco_ray.run` on ONE
built problem, so the 2 M-sample problem is built once and its optimum (L-BFGS) solved once,
instead of once per Tune trial: on a small shared machine that is the difference between
an hour and several. `--only` restricts an algorithm to some of the grid's values (say so
when reporting); `--twin H...` also runs FSVRG at those step sizes on the reshuffled twin
(`problem.reshuffle: true`, FSVRGR: same samples over nodes of the same sizes, so the same
f and w*). One JSON line per run is appended to `--out` (runs already there are skipped, so
an interrupted job resumes); then figures are drawn from all lines in the file:

- e7_fig2_suboptimality.png: f(w) - f(w*) per round, best step size per method;
- e7_fig2_test_error.png: test error per round, best step size per method, and OPT's;
- e7_fig2_sweep.png: final f - f* against the step size, per method (the sweep).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from fco_ray.runtime.files import append_file, replacing

ROOT = Path(__file__).resolve().parents[1]


def parse_only(items: list[str]) -> dict[str, list[float]]:
    out = {}
    for item in items:
        name, _, values = item.partition("=")
        out[name] = [float(v) for v in values.split(",") if v]
    return out


def plan(sweep: dict, only: dict[str, list[float]],
         twin: list[float]) -> list[tuple[str, float | None, bool]]:
    grid = sweep.get("search", {}).get("grid", {}).get("algorithm.client_lr", [None])
    runs = []
    for name in sweep["algorithms"]:
        if name == "cocoa_plus":  # no step size: one run, unless `--only cocoa_plus=`
            steps = [] if only.get(name, None) == [] else [None]
        else:
            steps = only.get(name, grid)
        runs += [(name, None if h is None else float(h), False) for h in steps]
        if name == "fsvrg":  # FSVRGR right after FSVRG: the pair the paper compares
            runs += [("fsvrg", float(h), True) for h in twin]
    if "fsvrg" not in sweep["algorithms"]:
        runs += [("fsvrg", float(h), True) for h in twin]
    return runs


def run_all(args, sweep: dict, runs: list, done: set) -> None:
    """Run the planned runs not yet in `args.out`: per (algorithm, twin) the step sizes as
    ONE fused group (`fco_ray.core.engine.run_rounds`: one pass over each node's data per exchange
    for every step size; each member's rows equal its own run, tests/engine/test_svrg_fused.py).
    Member rows go to `<out>.progress` as they come (a cut run can still be reported);
    a finished group appends one "run" line per member to `args.out`."""
    from fco_ray.algorithms import ALGORITHMS
    from fco_ray.backends import LocalBackend
    from fco_ray.core.config import parse_problem, parse_run
    from fco_ray.core.engine import run_rounds
    from fco_ray.core.group import make_group
    from fco_ray.problems import build_problem

    problem_cfg = dict(sweep["problem"])
    seed = int(sweep.get("seeds", [0])[0])
    rounds = args.rounds or int(sweep["rounds"])
    todo = [r for r in runs if json.dumps(list(r)) not in done]
    if not todo:
        return
    problems = {}
    start = time.perf_counter()
    problems[False] = build_problem(parse_problem({**problem_cfg, "reshuffle": False}), seed)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    opt = problems[False].optimum
    header = {"kind": "problem", "n": int(problems[False].train.x.shape[0]),
              "nnz": int(problems[False].train.x.nnz), "nodes": int(problems[False].num_clients),
              "d": int(problems[False].train.dim), "max_node": int(problems[False].train.sizes.max()),
              "opt": opt.value, "opt_grad_norm": opt.grad_norm, "opt_test_error": opt.test_error,
              "opt_iterations": opt.iterations, "build_s": build_s,
              "optimum_s": time.perf_counter() - start}
    if any(twin for _, _, twin in todo):
        problems[True] = build_problem(parse_problem({**problem_cfg, "reshuffle": True}), seed)
        problems[True].__dict__["optimum"] = opt  # the same samples: the same f and w*
    groups: dict[tuple[str, bool], list] = {}
    for name, h, twin in todo:
        groups.setdefault((name, twin), []).append(h)
    progress = Path(str(args.out) + ".progress")
    append_file(args.out, json.dumps(header) + "\n")
    for (name, twin), steps in groups.items():
        configs = [parse_run({"problem": {"name": "custom"}, "rounds": rounds,
                              "eval_every": args.eval_every,
                              "seed": seed, "algorithm": {"name": name} if h is None
                              else {"name": name, "client_lr": h}}) for h in steps]
        algorithms = [ALGORITHMS[name](c.algorithm) for c in configs]
        label = name + ("R" if twin else "")
        start = time.perf_counter()

        def on_round(rnd, rows, ended, label=label, steps=steps, start=start):
            append_file(progress, "".join(json.dumps({"algorithm": label, "h": steps[i], **row}) + "\n"
                                          for i, row in rows.items()))
            print(f"{label} round {rnd}: {time.perf_counter() - start:.0f} s, load "
                  f"{os.getloadavg()[0]:.1f}" + (f", ended {[steps[i] for i in ended]}" if ended else ""),
                  flush=True)

        backend = LocalBackend(problems[twin])
        results = run_rounds(problems[twin], make_group(algorithms), backend, rounds=rounds,
                             eval_every=args.eval_every, seed=seed,
                             divergence=configs[0].divergence, on_round=on_round)
        seconds = time.perf_counter() - start
        for h, result in zip(steps, results):
            records = result.records
            line = {"kind": "run", "key": [name, h, twin], "algorithm": label, "h": h,
                    "status": result.status, "seconds": seconds, "group": len(steps),
                    "rounds": rounds, "eval_every": args.eval_every,
                    "load": os.getloadavg()[0],
                    **{k: [r[k] for r in records] for k in ("round", "train_loss",
                                                             "suboptimality", "test_error")}}
            append_file(args.out, json.dumps(line) + "\n")
            print(f"{label:12s} h={h} {line['status']} f-f*={line['suboptimality'][-1]:.3g} "
                  f"test={line['test_error'][-1]:.4f}", flush=True)
        print(f"{label}: {len(steps)} step sizes fused, {seconds:.0f} s", flush=True)


def cut_runs(progress: Path, lines: list[dict], seconds_per_round: dict[str, float]) -> list[dict]:
    """"run" lines, status "cut", for the members of a group stopped before its last round,
    from the rows its `.progress` file holds (members with a finished run are left out)."""
    finished = {(r["algorithm"], r["h"]) for r in lines if r["kind"] == "run"}
    rows: dict[tuple, list] = {}
    for s in progress.read_text().splitlines():
        row = json.loads(s)
        rows.setdefault((row["algorithm"], row["h"]), []).append(row)
    out = []
    for (label, h), member in rows.items():
        if (label, h) in finished:
            continue
        rounds = max(r["round"] for r in member)
        out.append({"kind": "run", "key": [label, h, label.endswith("R")], "algorithm": label,
                    "h": h, "status": "cut", "rounds": rounds, "group": 0,
                    "seconds": seconds_per_round.get(label, float("nan")) * rounds,
                    **{k: [r[k] for r in member] for k in ("round", "train_loss", "suboptimality",
                                                          "test_error")}})
    return out


def best_runs(lines: list[dict]) -> dict[str, dict]:
    """Per method, the run with the lowest final suboptimality among finished runs."""
    best = {}
    for r in lines:
        if r["status"] not in ("finished", "cut"):
            continue
        old = best.get(r["algorithm"])
        if old is None or r["suboptimality"][-1] < old["suboptimality"][-1]:
            best[r["algorithm"]] = r
    return best


def figures(lines: list[dict], header: dict, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = best_runs(lines)
    order = [m for m in ("fsvrg", "fsvrgR", "gd", "fsvrg_naive", "dane", "cocoa_plus") if m in best]
    label = {"fsvrg": "FSVRG", "fsvrgR": "FSVRGR", "gd": "GD", "fsvrg_naive": "naive FSVRG",
             "dane": "DANE", "cocoa_plus": "CoCoA+"}
    title = (f"{header['nodes']:,} nodes, n = {header['n']:,}, nnz = {header['nnz']:,}, "
             f"d = {header['d']:,}")
    for metric, name, ylabel in (("suboptimality", "e7_fig2_suboptimality.png", "f(w) - f(w*)"),
                                 ("test_error", "e7_fig2_test_error.png", "test error")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for m in order:
            r = best[m]
            h = "" if r["h"] is None else f", h = {r['h']:g}"
            ax.plot(r["round"], r[metric], label=f"{label[m]}{h}")
        if metric == "test_error":
            ax.axhline(header["opt_test_error"], color="k", ls="--", lw=1, label="OPT")
        else:
            ax.set_yscale("log")
        ax.set_xlabel("communication round")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        with replacing(folder / name) as temp:
            fig.savefig(temp, dpi=110)
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in ("fsvrg", "gd", "fsvrg_naive", "dane"):
        runs = sorted((r for r in lines if r["algorithm"] == m and r["h"] is not None), key=lambda r: r["h"])
        if runs:
            final = [r["suboptimality"][-1] if r["status"] in ("finished", "cut") else np.nan for r in runs]
            ax.plot([r["h"] for r in runs], final, "o-", label=label[m])
    if "cocoa_plus" in best:
        ax.axhline(best["cocoa_plus"]["suboptimality"][-1], color="gray", ls=":", label="CoCoA+ (no step)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step size h (algorithm.client_lr)")
    ax.set_ylabel("f - f* after the last round (diverged: missing)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with replacing(folder / "e7_fig2_sweep.png") as temp:
        fig.savefig(temp, dpi=110)
    plt.close(fig)


def table(lines: list[dict], header: dict) -> str:
    """Markdown: one row per run, methods in the figures' order, step sizes ascending."""
    present = {k for r in lines for k in r["round"]}
    at = [k for k in (1, 2, 5, 10, 20, 30, 50, 100, 150, 200, 300) if k in present]
    at_err = [k for k in (10, 30, 50, 100, 150, 200, 300) if k in present]
    target = header["opt_test_error"] + 0.01
    rows = ["| method | h | rounds to test error <= OPT + 0.01 | "
            + " | ".join(f"f - f* @ {r}" for r in at)
            + f" | test error @ {' / '.join(map(str, at_err))} | status | s / round (group) |",
            "|---|---:|---:|" + "---:|" * len(at) + "---|---|---:|"]
    rank = {m: i for i, m in enumerate(("fsvrg", "fsvrgR", "gd", "fsvrg_naive", "dane", "cocoa_plus"))}
    for r in sorted(lines, key=lambda r: (rank.get(r["algorithm"], 9), r["h"] or 0)):
        sub = dict(zip(r["round"], r["suboptimality"]))
        err = dict(zip(r["round"], r["test_error"]))
        hit = [k for k, e in zip(r["round"], r["test_error"]) if e <= target]
        cells = [f"{sub[k]:.3g}" if k in sub else "-" for k in at]
        errs = " / ".join(f"{err[k]:.4f}" if k in err else "-" for k in at_err)
        rounds = max(r["round"])
        planned = r.get("rounds", rounds)
        h = "-" if r["h"] is None else f"{r['h']:g}"
        rows.append(f"| {r['algorithm']} | {h} | "
                    f"{hit[0] if hit else f'> {rounds}'} | " + " | ".join(cells)
                    + f" | {errs} | {r['status']} | {r['seconds'] / max(planned, 1):.1f}"
                    + (f" ({r['group']})" if r.get("group", 1) > 1 else "") + " |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default=str(ROOT / "sweeps" / "e7_fsvrg.yaml"))
    ap.add_argument("--only", nargs="*", default=[], help="name=h1,h2 (a subset of the grid)")
    ap.add_argument("--twin", nargs="*", type=float, default=[], help="FSVRGR step sizes")
    ap.add_argument("--rounds", type=int, default=0, help="0: the sweep file's")
    ap.add_argument("--eval-every", type=int, default=1, help="metrics every this many rounds")
    ap.add_argument("--out", default=None, help="default results/e7_fig2.jsonl")
    ap.add_argument("--figures", default=None, help="default results/")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: the sweep's problem at 30 nodes, 3 rounds, two step sizes of "
                         "each algorithm, one FSVRGR twin; results and figures in a temporary "
                         "directory unless --out / --figures name them")
    ap.add_argument("--set", action="append", default=[], metavar="problem.KEY=VALUE",
                    help="override a key of the sweep's problem section (e.g. problem.clients=1000)")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--also", nargs="*", default=[], help="more result files for the table and figures")
    ap.add_argument("--cut", nargs=2, action="append", default=[], metavar=("PROGRESS", "SECONDS"),
                    help="a .progress file of a group stopped early, and its measured seconds "
                         "per round as method=s,... (its rows so far enter as status 'cut')")
    args = ap.parse_args()
    sweep = yaml.safe_load(Path(args.sweep).read_text())
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("problem.") or len(key) <= len("problem."):
            print(f"error: --set takes problem.KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        sweep["problem"] = {**sweep["problem"], key[len("problem."):]: yaml.safe_load(value)}
    if args.set:
        from fco_ray.core.config import parse_problem
        from fco_ray.runtime.errors import ConfigError
        try:
            parse_problem(dict(sweep["problem"]))
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    results = Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else ROOT / "results"
    args.out, args.figures = args.out or str(results / "e7_fig2.jsonl"), args.figures or str(results)
    if args.quick:
        grid = sweep.get("search", {}).get("grid", {}).get("algorithm.client_lr", [1.0])
        sweep["problem"] = {**sweep["problem"], "clients": 30}
        args.rounds, args.twin = args.rounds or 3, args.twin or [float(grid[0])]
        args.only = args.only or [f"{name}={','.join(map(str, grid[:2]))}"
                                  for name in sweep["algorithms"] if name != "cocoa_plus"]
    out = Path(args.out)
    lines = [json.loads(s) for s in out.read_text().splitlines()] if out.is_file() else []
    for extra in args.also:  # other runs' files (e.g. a second process), for the table and figures
        lines += [json.loads(s) for s in Path(extra).read_text().splitlines()]
    done = {json.dumps(r["key"]) for r in lines if r["kind"] == "run"}
    if not args.plot_only:
        run_all(args, sweep, plan(sweep, parse_only(args.only), args.twin), done)
        lines = [json.loads(s) for s in out.read_text().splitlines()]
        for extra in args.also:
            lines += [json.loads(s) for s in Path(extra).read_text().splitlines()]
    for progress, per_round in args.cut:  # groups stopped early: their rows so far
        lines += cut_runs(Path(progress), lines, {k: float(v) for k, v in
                                                  (x.split("=") for x in per_round.split(","))})
    headers = [r for r in lines if r["kind"] == "problem"]
    runs = [r for r in lines if r["kind"] == "run"]
    if headers and runs:
        figures(runs, headers[0], Path(args.figures))
        print(table(runs, headers[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
