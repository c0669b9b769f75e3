"""Fused sweeps vs unfused: the configuration axis of fco_ray.core.group, measured side by side.

    .venv/bin/python benchmarks/fused.py [--rounds R] [--repeats N] [--grid-rounds R] [--sweep FILE]
                                         [--sweep-rounds R] [--set K=V] [--only rounds,grid,sweep] [--out FILE]

rounds  per-round cost of one configuration (engine.run_rounds) and of a fused group of G
        configurations (engine.run_rounds of the group make_group forms) on the same problem, interleaved A, B, A, B, ... so
        both see the same load: E1 (lasso, paper defaults, FedDualAvg, the 42 rate pairs of
        sweeps/e1_lasso.yaml), E2 (lowrank, the same grid), E5 (bilinear_l1, K = 10, FeDualEx,
        the paper's 35 pairs). Reported: ms per round (min and median), the group's cost in
        units of one configuration's round, and configurations x rounds per second gained.
grid    `fco_ray.run_grid(config, grid)` (the public API) with `fuse=True` and `fuse=False`, whole
        calls timed, interleaved: E1 FedDualAvg's 42 rate pairs (sweeps/e1_lasso.yaml's grid) at
        `--grid-rounds` rounds, evaluated every 20; reported: wall min / median and the ratio.
sweep   `fco-ray sweep FILE` end to end (`--sweep`, default sweeps/e1_lasso.yaml: 504
        configurations; at `--sweep-rounds` rounds), with `tune.fuse=false` and
        `tune.fuse=true`, one after the other, each with its own store and Tune state in a
        temporary directory.
Nothing is asserted; the results file records the command, the machine's load and the numbers.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import numpy as np  # noqa: E402

from benchmarks.machine import cpu_model  # noqa: E402

from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.backends import LocalBackend  # noqa: E402
from fco_ray.core.config import parse_run  # noqa: E402
from fco_ray.core.engine import run_rounds  # noqa: E402
from fco_ray.core.group import make_group  # noqa: E402
from fco_ray.problems import build_problem  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

PAPER_RATES = [{"client_lr": c, "server_lr": s}
               for c in (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4)
               for s in (10.0, 3.0, 1.0, 0.3, 0.1, 0.03)]
E5_RATES = [{"client_lr": c, "server_lr": s}
            for c in (1, .3, .1, .03, .01, .003, .001) for s in (1, .3, .1, .03, .01)]
CASES = {
    "E1 lasso, FedDualAvg": ({"name": "lasso"}, "feddualavg", {}, PAPER_RATES),
    "E1 lasso, FedMiD (35 pairs)": ({"name": "lasso"}, "fedmid", {}, PAPER_RATES[:35]),
    "E2 lowrank, FedDualAvg": ({"name": "lowrank"}, "feddualavg", {}, PAPER_RATES),
    "E5 bilinear_l1 K=10, FeDualEx": ({"name": "bilinear_l1"}, "feddualex",
                                      {"local_steps": 10, "clients_per_round": None,
                                       "batch_size": None}, E5_RATES),
}


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of fn(): CPU time of this process (all its threads) is less
    sensitive to the other jobs of a shared machine than wall time."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def per_round(rounds: int, repeats: int, cases: dict, record: list) -> list[str]:
    """For each case: one configuration and the fused group, with the registered accelerator
    of the pair (the default where its record finds it faster) and with the rule compiled
    (only where an accelerator serves the case), interleaved so all see the same load. Times per round (evaluations every 20 rounds, as the E1 and E2 sweeps, and at
    round 0): wall min / median, and CPU median; each line also appended to `record` as a dict."""
    lines = ["| case | G | local loop | one configuration, ms/round: wall min / median (CPU) | "
             "fused group, ms/round: wall min / median (CPU) | group cost in single rounds "
             "(wall; CPU) | configurations x rounds per s, fused / unfused | 1-min load before / after |",
             "|---|---|---|---|---|---|---|---|"]
    for name, (problem_section, algorithm, fixed, grid) in cases.items():
        cfgs = [parse_run({"problem": problem_section, "algorithm": {"name": algorithm, **fixed, **g}})
                for g in grid]
        problem = build_problem(cfgs[0].problem, 0)
        algorithms = [ALGORITHMS[algorithm](c.algorithm) for c in cfgs]
        # a stable member (the smallest rates) times the single run: a diverged run stops early
        stable = min(range(len(grid)), key=lambda i: grid[i]["client_lr"] * grid[i]["server_lr"])
        loops = ["accelerator", "rule"] if accelerated(problem, algorithms) else ["-"]
        times = {loop: {"single": [], "fused": []} for loop in loops}
        # a backend per choice: a backend keeps the engine it chose for a group
        backends = {loop: LocalBackend(problem) for loop in loops}
        before = os.getloadavg()[0]
        every = min(20, rounds)  # E1-E2 sweeps evaluate every 20 rounds
        for rep in range(repeats + 1):  # the first repeat warms up (compilation, caches)
            for loop in loops:
                backend = backends[loop]
                with choice(loop):
                    one = timed(lambda: run_rounds(problem, make_group([algorithms[stable]]), backend, rounds=rounds,
                                                   eval_every=every, seed=0, divergence=None))
                    group = timed(lambda: run_rounds(problem, make_group(algorithms), backend, rounds=rounds,
                                                    eval_every=every, seed=0, divergence=None))
                if rep:
                    times[loop]["single"].append([t / rounds for t in one])
                    times[loop]["fused"].append([t / rounds for t in group])
        results = run_rounds(problem, make_group(algorithms), LocalBackend(problem), rounds=2, eval_every=2, seed=0,
                            divergence=None)
        g = len(algorithms)
        alive = sum(r.status == "finished" for r in results)
        after = os.getloadavg()[0]
        for loop in loops:
            single, fused = np.array(times[loop]["single"]), np.array(times[loop]["fused"])
            ws, wf = np.median(single[:, 0]), np.median(fused[:, 0])
            cs, cf = np.median(single[:, 1]), np.median(fused[:, 1])
            record.append({"case": name, "G": g, "finished": alive, "loop": loop,
                           "single_wall_min_s": float(single[:, 0].min()), "single_wall_median_s": float(ws),
                           "fused_wall_min_s": float(fused[:, 0].min()), "fused_wall_median_s": float(wf),
                           "single_cpu_median_s": float(cs), "fused_cpu_median_s": float(cf),
                           "load_before": before, "load_after": after})
            lines.append(f"| {name} | {g} ({alive} finished) | {loop} | {single[:, 0].min() * 1e3:.2f} / "
                         f"{ws * 1e3:.2f} ({cs * 1e3:.2f}) | {fused[:, 0].min() * 1e3:.2f} / "
                         f"{wf * 1e3:.2f} ({cf * 1e3:.2f}) | {wf / ws:.1f}; {cf / cs:.1f} | "
                         f"{g * ws / wf:.1f}x | {before:.2f} / {after:.2f} |")
            print(lines[-1], flush=True)
    return lines


def accelerated(problem, algorithms) -> bool:
    """Whether a registered accelerator serves this case (fco_ray.accelerators)."""
    from fco_ray.accelerators import registered

    group = make_group(algorithms)
    from fco_ray.rules.numpy_problem import problem_rule

    rule = problem_rule(problem, group.hp.minibatch)
    return getattr(group, "runs_rule", False) and any(acc.serves(group, problem) for acc in registered(group, rule))


@contextlib.contextmanager
def choice(loop: str):
    """The accelerator forced on ("accelerator") or off ("rule"); "-": the engine's own choice."""
    from fco_ray import accelerators

    if loop == "-":
        yield
        return
    saved = accelerators.faster
    accelerators.faster = lambda name, group, speeds=None: loop == "accelerator"
    try:
        yield
    finally:
        accelerators.faster = saved


def grid(rounds: int, repeats: int, record: dict) -> list[str]:
    """`fco_ray.run_grid` of E1 FedDualAvg's 42 rate pairs, fused and each configuration alone,
    interleaved (the first repeat warms up: numba compilation, caches); the times also go into
    `record`."""
    import fco_ray

    before = os.getloadavg()[0]
    config = {"problem": {"name": "lasso"}, "algorithm": {"name": "feddualavg"}, "rounds": rounds,
              "eval_every": min(20, rounds), "seed": 0}
    axes = {"algorithm.client_lr": sorted({g["client_lr"] for g in PAPER_RATES}),
            "algorithm.server_lr": sorted({g["server_lr"] for g in PAPER_RATES})}
    times = {True: [], False: []}
    for rep in range(repeats + 1):
        for fuse in (True, False):
            t = time.perf_counter()
            df = fco_ray.run_grid(config, axes, fuse=fuse)
            if rep:
                times[fuse].append(time.perf_counter() - t)
    configs = len(PAPER_RATES)
    finished = int(df.groupby(list(axes))["status"].first().eq("finished").sum())
    fused, alone = np.array(times[True]), np.array(times[False])
    record.update(configurations=configs, finished=finished, rounds=rounds, fused_s=times[True],
                  separate_s=times[False], load_before=before, load_after=os.getloadavg()[0])
    lines = [f"E1 lasso, FedDualAvg, {configs} configurations ({finished} finished), {rounds} rounds, "
             f"{repeats} repeats:", "",
             "| run_grid | wall s: min / median |", "|---|---|",
             f"| fuse=True | {fused.min():.2f} / {np.median(fused):.2f} |",
             f"| fuse=False | {alone.min():.2f} / {np.median(alone):.2f} |", "",
             f"fused / separate: 1 / {alone.min() / fused.min():.1f} (min), "
             f"1 / {np.median(alone) / np.median(fused):.1f} (median)"]
    print("\n".join(lines), flush=True)
    return lines


def sweep(path: str, rounds: int, sets: list[str], record: dict) -> list[str]:
    lines = ["| tune.fuse | Tune trials | configurations | wall time, s |", "|---|---|---|---|"]
    times = {}
    record.update(file=path, rounds=rounds, sets=list(sets), load_before=os.getloadavg()[0])
    for fuse in ("false", "true"):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "fco_ray", "sweep", str(ROOT / path),
                   "--set", f"rounds={rounds}", "--set", f"tune.fuse={fuse}", "--set", "report=false",
                   "--set", f"tracking.uri=sqlite:///{tmp}/mlflow.db", "--storage", f"{tmp}/state",
                   *[a for kv in sets for a in ("--set", kv)]]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            env.pop("RAY_ADDRESS", None)
            t = time.perf_counter()
            out = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
            times[fuse] = time.perf_counter() - t
            if out.returncode != 0:
                raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
            first = out.stdout.splitlines()[0]
        from fco_ray.sweep import load_sweep

        sw = load_sweep(ROOT / path, [f"rounds={rounds}", f"tune.fuse={fuse}", *sets])
        record[f"fuse={fuse}"] = {"tune_trials": sw.num_tune_trials(), "configurations": sw.num_trials(),
                                  "wall_s": times[fuse], "load_after": os.getloadavg()[0]}
        lines.append(f"| {fuse} | {sw.num_tune_trials()} | {sw.num_trials()} | {times[fuse]:.0f} |")
        print(lines[-1], first, flush=True)
    lines.append(f"\nfused / unfused wall time: 1 / {times['false'] / times['true']:.1f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--grid-rounds", type=int, default=200)
    parser.add_argument("--sweep", default="sweeps/e1_lasso.yaml", help="the sweep file to run")
    parser.add_argument("--sweep-rounds", type=int, default=100)
    parser.add_argument("--only", default="rounds,grid,sweep")
    parser.add_argument("--cases", default="", help="per-round cases whose name contains one "
                        "of these comma-separated words (default: all), e.g. E5")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a sweep file override for both sweeps, e.g. seeds=[0] (repeatable)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of the per-round and grid sections: groups of 3 on E1 "
                             "and E2, 3 rounds, one repeat, the page in a temporary directory "
                             "unless --out names one (with --only sweep: the sweep's rounds 3, "
                             "seeds [0])")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.repeats, args.sweep_rounds, args.grid_rounds = 3, 1, 3, 3
        args.only = args.only if "--only" in sys.argv else "rounds,grid"
        args.set = [*args.set, "seeds=[0]"]
    started = _dt.datetime.now()
    command = f"python benchmarks/fused.py {' '.join(sys.argv[1:])}".strip()
    import fco_ray  # the checkout whose fco_ray runs (a worktree on PYTHONPATH, or this one)

    code = Path(fco_ray.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(code), "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "?"
    record = {"command": command, "commit": commit, "date": started.isoformat(timespec="seconds"),
              "cpu": cpu_model(), "cpus": os.cpu_count(), "load_start": load(), "rounds": [], "grid": {},
              "sweep": {}}
    out = [f"# Fused vs unfused ({started:%Y-%m-%d %H:%M})", "",
           f"Command: `{command}` at commit {commit}",
           f"Machine: {cpu_model()}, {os.cpu_count()} CPUs; "
           f"load average (1 / 5 / 15 min) at start {load()}", ""]
    if "rounds" in args.only:
        words = [w for w in args.cases.split(",") if w]
        cases = {k: v for k, v in CASES.items() if not words or any(w in k for w in words)}
        if args.quick:  # groups of 3 on E1 and E2 (E5's rounds take seconds)
            cases = {k: (*v[:3], v[3][:3]) for k, v in cases.items() if "E5" not in k}
        out += ["## Per round", "", *per_round(args.rounds, args.repeats, cases, record["rounds"]), ""]
    if "grid" in args.only:
        out += [f"## `fco_ray.run_grid`, fused and separate ({args.grid_rounds} rounds)", "",
                *grid(args.grid_rounds, args.repeats, record["grid"]), ""]
    if "sweep" in args.only:
        out += [f"## `fco-ray sweep {args.sweep}` end to end ({args.sweep_rounds} rounds)", "",
                *sweep(args.sweep, args.sweep_rounds, args.set, record["sweep"]), ""]
    out.append(f"Load average (1 / 5 / 15 min) at the end: {load()}")
    results = Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else ROOT / "benchmarks/results"
    path = Path(args.out or results / f"fused_{started:%Y-%m-%d_%H%M}.md")
    write_file(path, "\n".join(out) + "\n")
    record["load_end"] = load()
    write_file(path.with_suffix(".json"), json.dumps(record, indent=1))
    print(f"written: {path}")


if __name__ == "__main__":
    main()
