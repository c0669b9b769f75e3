"""E7 memory: the sparse text problem's memory grows with the number of nonzeros, not n x d.

    .venv/bin/python benchmarks/e7_memory.py [--clients 1000 3000 10000] [--round-at 10000]
                                            [--chunk-size 1024] [--out benchmarks/results/e7_memory.md]

For each number of nodes (default paper generator: node sizes 75..9,000, d = 20,000 words,
~20 words per post), a fresh subprocess builds `sparse_text_logreg` under `tracemalloc`
(NumPy and SciPy report their buffers to it) and reports: samples n, nonzeros nnz, the
bytes the problem holds (CSR arrays, labels, FSVRG's per-nonzero scalings, test block),
bytes per nonzero, and the peak traced memory while generating it. A dense n x d float64
matrix is shown for scale. At `--round-at` nodes it also runs one FSVRG round (both
exchanges: node gradients, then the local passes) through the local backend and reports its
time and traced peak (and those of one fused round of `--fused` step sizes): the compiled per-node passes (`fco_ray.ops.kernels_sparse`) keep O(d) state
per call and add every node's weighted result into one length-d vector, so that peak is
O(d + the chunk's nodes), neither O(chunk_size x d) nor growing with the number of nodes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20


def traced_round(problem, backend, algorithm, state, ids):
    """One round of every node (all its exchanges) through the backend: (new state, seconds,
    traced peak bytes above what was held before it)."""
    from fco_ray.ops.random import Key

    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    for _ in range(algorithm.exchanges_per_round):
        total, weight = backend.map_clients(algorithm, algorithm.broadcast(state), ids, Key(0, 0, ids))
        state = algorithm.server_update(problem, state, {k: v / weight for k, v in total.items()}, 0)
    return state, time.perf_counter() - start, tracemalloc.get_traced_memory()[1] - before


def held_bytes(problem) -> int:
    total = sum(a.nbytes for a in problem.train.arrays.values()) + problem.train.sizes.nbytes
    if problem.val is not None:
        total += sum(a.nbytes for a in problem.val.arrays.values())
    return total + problem.aggregation.nbytes


def child(clients: int, run_round: bool, chunk_size: int, fused: int = 0) -> dict:
    from fco_ray.algorithms import ALGORITHMS
    from fco_ray.backends import LocalBackend
    from fco_ray.core.config import parse_problem
    from fco_ray.core.group import make_group
    from fco_ray.problems import build_problem

    tracemalloc.start()
    start = time.perf_counter()
    problem = build_problem(parse_problem({"name": "sparse_text_logreg", "clients": clients}), 0)
    build_s = time.perf_counter() - start
    build_peak = tracemalloc.get_traced_memory()[1]
    x = problem.train.x
    out = {"clients": clients, "n": x.shape[0], "d": x.shape[1], "nnz": int(x.nnz),
           "test_nnz": int(problem.val.x.nnz), "max_node": int(problem.train.sizes.max()),
           "held": held_bytes(problem), "build_peak": build_peak, "build_s": build_s}
    if run_round:
        name = "fsvrg"
        algorithm = make_group([ALGORITHMS[name](ALGORITHMS[name].Hyper(name=name, client_lr=300.0))])
        backend = LocalBackend(problem, chunk_size)
        state = algorithm.server_init(problem, {"w": np.zeros(problem.train.dim)})
        ids = np.arange(problem.num_clients)
        state, seconds, peak = traced_round(problem, backend, algorithm, state, ids)
        out.update(round_s=seconds, round_peak=peak, chunk_size=chunk_size,
                   finite=bool(np.all(np.isfinite(state["w"]))))
        if fused:  # one round of a fused step-size group (fco_ray.core.group): G models at once
            from fco_ray.core.group import Stacked, stack_states

            steps = [300.0 * 2.0 ** (i - fused // 2) for i in range(fused)]
            group = Stacked([ALGORITHMS[name](ALGORITHMS[name].Hyper(name=name, client_lr=h))
                           for h in steps])
            state = stack_states([m.server_init(problem, {"w": np.zeros(problem.train.dim)})
                                  for m in group.members])
            state, seconds, peak = traced_round(problem, backend, group, state, ids)
            out.update(fused=fused, fused_round_s=seconds, fused_round_peak=peak,
                       fused_finite=bool(np.all(np.isfinite(state["w"]))))
    tracemalloc.stop()
    return out


def report(rows: list[dict], command: str) -> str:
    lines = [
        "# E7 memory: sparse text problem vs number of nonzeros", "",
        f"Command: `{command}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, NumPy {np.__version__}; "
        f"shared with other jobs (timings are indicative; load average at the end "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores).", "",
        "| nodes | samples n | nnz | held MiB | held bytes / nnz | build peak MiB | peak / nnz | "
        "dense n x d MiB | build s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        nnz = r["nnz"] + r["test_nnz"]
        lines.append(
            f"| {r['clients']:,} | {r['n']:,} | {nnz:,} | {r['held'] / MiB:,.0f} | "
            f"{r['held'] / nnz:.1f} | {r['build_peak'] / MiB:,.0f} | {r['build_peak'] / nnz:.1f} | "
            f"{r['n'] * r['d'] * 8 / MiB:,.0f} | {r['build_s']:.1f} |")
    lines += ["", "nnz counts training + test nonzeros; held = CSR arrays (8 B value + 4 B column "
              "index per nonzero), labels, row pointers, node sizes, FSVRG's per-nonzero s_k^j "
              "(8 B) and per-feature a^j.", ""]
    for r in rows:
        if "round_s" in r:
            lines += [f"One FSVRG round at {r['clients']:,} nodes (largest node {r['max_node']:,} "
                      f"samples; local backend, chunk_size {r['chunk_size']}): "
                      f"{r['round_s']:.1f} s, traced peak {r['round_peak'] / MiB:,.1f} MiB above the "
                      f"data ({r['round_peak'] / (r['d'] * 8):.0f} x one length-d float64 vector; "
                      f"one chunk_size x d block would be {r['chunk_size'] * r['d'] * 8 / MiB:,.0f} MiB); "
                      f"iterate finite: {r['finite']}.", ""]
        if "fused_round_s" in r:
            lanes = -(-min(r["fused"], 8) // 4) * 4  # kernels_sparse: blocks of <= 8, 4 lanes
            lines += [f"One fused FSVRG round of {r['fused']} step sizes at {r['clients']:,} nodes: "
                      f"{r['fused_round_s']:.1f} s, traced peak {r['fused_round_peak'] / MiB:,.1f} MiB "
                      f"above the data ({r['fused_round_peak'] / (r['d'] * 8 * r['fused']):.0f} x "
                      f"one length-d vector per member); the group kernel's own scratch, allocated "
                      f"by numba and not traced, is (6 + 1) x d x {lanes} lanes doubles = "
                      f"{7 * r['d'] * lanes * 8 / MiB:.1f} MiB per call (plus a few length-d "
                      f"vectors), independent of the nodes; "
                      f"iterates finite: {r['fused_finite']}.", ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1000, 3000, 10000])
    ap.add_argument("--round-at", type=int, default=10000, help="nodes at which to time one FSVRG round (0: none)")
    ap.add_argument("--chunk-size", type=int, default=1024)
    ap.add_argument("--fused", type=int, default=7,
                    help="at --round-at, also one fused round of this many step sizes (0: none)")
    ap.add_argument("--out", default=None, help="default benchmarks/results/e7_memory.md")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--round", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 30 nodes with a round and a fused round of 2, the page in a "
                         "temporary directory unless --out names one")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.round_at, args.fused = [30], 30, 2
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "e7_memory.md")
    if args.child:
        print(json.dumps(child(args.child, args.round, args.chunk_size, args.fused)))
        return 0
    rows = []
    for clients in args.clients:
        cmd = [sys.executable, __file__, "--child", str(clients), "--chunk-size", str(args.chunk_size),
               "--fused", str(args.fused)]
        if clients == args.round_at:
            cmd.append("--round")
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    command = "python benchmarks/e7_memory.py " + " ".join(sys.argv[1:])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_file(Path(args.out), report(rows, command.strip()))
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
