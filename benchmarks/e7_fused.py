"""E7 step-size grid fused vs unfused: one round of a fused group vs its G unfused rounds.

    nice -n 10 .venv/bin/python benchmarks/e7_fused.py [--clients 10000] [--repeats 3]
        [--methods fsvrg gd fsvrg_naive dane] [--grid 1 3 10 30 100 300 1000]
        [--out benchmarks/results/e7_fused.md]

Builds `sparse_text_logreg` (default 10,000 nodes, the paper's scale) once; then, per
method, times side by side and interleaved, `--repeats` times:

- fused: one communication round of the fused group of the G step sizes of `--grid` (the
  grid of sweeps/e7_fsvrg.yaml by default) through the engine's pieces (`fco_ray.core.group.Stacked`:
  every exchange through the local backend's `map_clients`, then the server update), i.e.
  one pass over each node's data serving all G members;
- unfused: the same round for each of the G configurations alone, one after the other
  (the sum of the G rounds is what a sweep without fusion pays per round).

Every round starts from the same generic point (not 0), all nodes take part (as in E7),
metrics are excluded. The fused members' models are checked against the unfused ones
(max relative difference reported; members that overflow must be non-finite in both).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.backends import LocalBackend  # noqa: E402
from fco_ray.core.config import parse_problem  # noqa: E402
from fco_ray.core.group import Stacked, make_group, stack_states  # noqa: E402
from fco_ray.ops.random import Key  # noqa: E402
from fco_ray.problems import build_problem  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

GRID = [1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0]


def one_round(problem, algorithm, state, backend, seed=0, rnd=0):
    """Every exchange of one round (all nodes) and the server updates; the new state."""
    ids = np.arange(problem.num_clients)
    with np.errstate(all="ignore"):
        for _ in range(algorithm.exchanges_per_round):
            total, weight = backend.map_clients(algorithm, algorithm.broadcast(state), ids,
                                                Key(seed, rnd, ids))
            state = algorithm.server_update(problem, state, {k: v / weight for k, v in total.items()}, rnd)
    return state


def timed(fn):
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return (time.perf_counter() - start, time.process_time() - cpu), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--methods", nargs="*", default=["fsvrg", "gd", "fsvrg_naive", "dane"])
    ap.add_argument("--grid", nargs="*", type=float, default=GRID)
    ap.add_argument("--out", default=None, help="default benchmarks/results/e7_fused.md")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 30 nodes, one repeat, fsvrg and gd on 3 step sizes, the "
                         "results in a temporary directory unless --out names one")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.repeats, args.methods, args.grid = 30, 1, ["fsvrg", "gd"], GRID[:3]
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "e7_fused.md")
    load_before = os.getloadavg()
    problem = build_problem(parse_problem({"name": "sparse_text_logreg", "clients": args.clients}), 0)
    train = problem.train
    w = np.random.default_rng(0).normal(0, 0.1, train.dim)
    backend = LocalBackend(problem)
    rows, loads = [], []
    for name in args.methods:
        cls = ALGORITHMS[name]
        members = [cls(cls.Hyper(name=name, client_lr=h)) for h in args.grid]
        fused = Stacked(members)
        states = [m.server_init(problem, {"w": w}) for m in members]
        stacked = stack_states(states)
        # compile and check: the fused members against their own rounds
        got = one_round(problem, fused, stacked, backend)["w"]
        worst = 0.0
        for g, (m, s) in enumerate(zip(members, states)):
            want = one_round(problem, make_group([m]), s, backend)["w"]
            finite = np.isfinite(want)
            if not np.array_equal(finite, np.isfinite(got[g])):
                raise AssertionError(f"{name} h={args.grid[g]}: fused and unfused differ in finiteness")
            if finite.all():
                step = np.abs(want - w).max()
                worst = max(worst, float(np.abs(got[g] - want).max() / step))
        fused_t, unfused_t, single_t = [], [], []
        for _ in range(args.repeats):
            fused_t.append(timed(lambda: one_round(problem, fused, stacked, backend))[0])
            alone = [timed(lambda: one_round(problem, make_group([m]), s, backend))[0] for m, s in zip(members, states)]
            unfused_t.append((sum(t[0] for t in alone), sum(t[1] for t in alone)))
            single_t.append(statistics.median(t[0] for t in alone))
        loads.append(os.getloadavg()[0])
        rows.append((name, fused_t, unfused_t, single_t, worst))
        print(name, fused_t, unfused_t, worst, flush=True)
    load_after = os.getloadavg()
    g = len(args.grid)
    command = "nice -n 10 .venv/bin/python benchmarks/e7_fused.py " + " ".join(sys.argv[1:])
    lines = [
        f"# E7 step-size grid at {args.clients:,} nodes: one fused round vs its {g} unfused rounds", "",
        f"Command: `{command.strip()}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, NumPy {np.__version__}; load average (1, 5, 15 min) before "
        f"{tuple(round(v, 2) for v in load_before)}, after {tuple(round(v, 2) for v in load_after)}; "
        f"1-min load after each method: {', '.join(f'{x:.1f}' for x in loads)}.", "",
        f"Problem: n = {train.x.shape[0]:,} training posts, nnz = {train.x.nnz:,}, d = {train.dim:,}, "
        f"{problem.num_clients:,} nodes (all take part). Step sizes h (client_lr): "
        f"{', '.join(f'{h:g}' for h in args.grid)} (G = {g}). {args.repeats} repeats, fused and "
        "unfused interleaved; one round = every exchange (FSVRG, naive FSVRG, DANE: 2; GD: 1) "
        "through the local backend plus the server update, metrics excluded.", "",
        "| method | fused round, wall s min / median | G unfused rounds, wall s min / median | "
        "unfused / fused, wall min (median) | CPU min | fused / one configuration's round (median) | "
        "fused = unfused to |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, fused_t, unfused_t, single_t, worst in rows:
        fw, uw = [t[0] for t in fused_t], [t[0] for t in unfused_t]
        fc, uc = min(t[1] for t in fused_t), min(t[1] for t in unfused_t)
        lines.append(
            f"| {name} | {min(fw):.2f} / {statistics.median(fw):.2f} | {min(uw):.2f} / "
            f"{statistics.median(uw):.2f} | {min(uw) / min(fw):.2f} ({statistics.median(uw) / statistics.median(fw):.2f}) | "
            f"{uc / fc:.2f} | {statistics.median(fw) / statistics.median(single_t):.2f} | {worst:.1e} |")
    lines += ["", "`fused = unfused to`: max |fused member - its own round| / max |step| over the "
              "members that stay finite (the others are non-finite in both).", ""]
    text = "\n".join(lines)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_file(Path(args.out), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
