"""Every registered accelerator (fco_ray/accelerators) beside the rule it accelerates, on this
CPU: the client work of one round (the sampled clients' K local steps and their weighted sum,
`Programs.client_sums`), per configuration, for the same group on the same problem.

    python benchmarks/accelerators.py --out benchmarks/results --speeds fco_ray/accelerators/speeds.json
    python benchmarks/accelerators.py --quick          # a smoke run (seconds), writes nothing
    python benchmarks/accelerators.py --only least_squares_nuclear   # one accelerator, writes nothing

Cases: E1 (lasso at the FCO paper's setting: d = 1024, 64 clients, 10 per round, K = 10,
B = 10) for `least_squares_l1`, and E2 (lowrank at its defaults: 32 x 32, rank 16, 64
clients, 10 per round, K = 10, B = 10, the setting of benchmarks/compiled_rounds.py) for
`least_squares_nuclear`; FedDualAvg and FedMiD (the two rules each serves), alone (G = 1) and
fused (G = 16, the quick start's trial). Each case times `repeats` x `rounds` calls of each
implementation after a warm-up call (which holds the compilation), interleaved so both see the
same load; reported: min and median ms per configuration-round, and their ratio. Writes
accelerators.json and accelerators.md under --out and, with --speeds, the table from which the
engine chooses an accelerator (`fco_ray.accelerators.faster`): per accelerator and G the
medians of the rule and of the accelerator, over the rules it serves.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread each, as a Ray trial of one CPU
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np  # noqa: E402

from fco_ray.accelerators import ACCELERATORS  # noqa: E402
from fco_ray.api import resolve  # noqa: E402
from fco_ray.core.plan import prepare  # noqa: E402
from fco_ray.ops.random import Key  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

#: each accelerator's problem: (the measured one, the --quick one)
PROBLEMS = {"least_squares_l1": ({"name": "lasso"}, {"name": "lasso", "dim": 64, "support": 8, "clients": 16}),
            "least_squares_nuclear": ({"name": "lowrank"}, {"name": "lowrank", "dim": 8, "rank": 4, "clients": 16})}
CASES = [("least_squares_l1", "feddualavg"), ("least_squares_l1", "fedmid"),
         ("least_squares_nuclear", "feddualavg"), ("least_squares_nuclear", "fedmid")]
GROUPS = (1, 16)


def measure(accelerator: str, algorithm: str, group: int, rounds: int, repeats: int, quick: bool) -> dict:
    from fco_ray.rules.host import Programs as Compiled
    from fco_ray.runtime.refs import resolve as ref

    problem_section = PROBLEMS[accelerator][1 if quick else 0]
    configs = [resolve({"problem": problem_section,
                        "algorithm": {"name": algorithm, "client_lr": 0.001 * (1 + 0.1 * g), "server_lr": 1.0,
                                      "local_steps": 10, "batch_size": 10, "clients_per_round": 10},
                        "rounds": 10, "eval_every": 10})
               for g in range(group)]
    prepared = prepare(configs)
    problem, grp = prepared.problem, prepared.group()
    acc = ref(ACCELERATORS[accelerator])
    state = grp.start(problem, 0)
    payload = grp.broadcast(state)
    program = Compiled().get(grp, problem)
    hyper = grp.rule_hyper(program.problem_rule.lam)
    assert acc.serves(grp, problem), (accelerator, algorithm)

    def by_rule(rnd):
        ids = grp.select_clients(0, rnd, problem.num_clients)
        return program.client_sums(payload, hyper, 0, rnd, ids, ids, grp.client_weights(problem, ids))

    def by_accelerator(rnd):
        ids = grp.select_clients(0, rnd, problem.num_clients)
        return acc.client_sums(grp, problem, payload, ids, Key(0, rnd, ids), grp.client_weights(problem, ids))

    a, b = by_rule(0), by_accelerator(0)  # warm-up (compilation), and the two agree
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-9, atol=1e-12)
    times = {"rule": [], "accelerator": []}
    for _ in range(repeats):
        for name, fn in (("rule", by_rule), ("accelerator", by_accelerator)):
            start = time.perf_counter()
            for rnd in range(1, rounds + 1):
                fn(rnd)
            times[name].append((time.perf_counter() - start) / rounds / group * 1e3)
    out = {"accelerator": accelerator, "algorithm": algorithm, "G": group, "rounds": rounds}
    for name, ts in times.items():
        out[f"{name}_min_ms"], out[f"{name}_ms"] = float(np.min(ts)), float(np.median(ts))
    return out


def table(rows: list[dict]) -> str:
    lines = ["| accelerator | algorithm | G | rule ms (min / median) | accelerator ms (min / median) | rule / accelerator (median) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['accelerator']} | {r['algorithm']} | {r['G']} | {r['rule_min_ms']:.4f} / {r['rule_ms']:.4f} "
                     f"| {r['accelerator_min_ms']:.4f} / {r['accelerator_ms']:.4f} | {r['rule_ms'] / r['accelerator_ms']:.1f}x |")
    return "\n".join(lines)


def speeds(rows: list[dict]) -> dict:
    """Per accelerator and G: the medians over the rules it serves (the engine's table)."""
    out: dict = {}
    for (name, g) in dict.fromkeys((r["accelerator"], r["G"]) for r in rows):
        same = [r for r in rows if r["accelerator"] == name and r["G"] == g]
        out.setdefault(name, []).append({"G": g, "rule_ms": float(np.median([r["rule_ms"] for r in same])),
                                         "accelerator_ms": float(np.median([r["accelerator_ms"] for r in same]))})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for accelerators.json / .md")
    parser.add_argument("--speeds", help="also write the engine's table here")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small problem, few rounds, nothing written")
    parser.add_argument("--only", default="", help="only these accelerators (comma-separated names)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.repeats = 2, 1
    if args.only and args.out:
        parser.error("--only measures part of the record: not with --out")
    load = [os.getloadavg()[0]]
    only = set(filter(None, args.only.split(",")))
    rows = [measure(a, alg, g, args.rounds, args.repeats, args.quick) for a, alg in CASES for g in GROUPS
            if not only or a in only]
    load.append(os.getloadavg()[0])
    print(table(rows))
    if args.quick or not args.out:
        return 0
    command = "python benchmarks/accelerators.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    record = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu, "cores": os.cpu_count(),
              "load_1min": load, "caches": "numba and JAX caches warm (a warm-up call first)", "rows": rows}
    write_file(os.path.join(args.out, "accelerators.json"), json.dumps(record, indent=1) + "\n")
    write_file(os.path.join(args.out, "accelerators.md"),
               f"# Accelerators beside their rules\n\n`{command}` on {record['date']}: {cpu}, "
               f"{record['cores']} cores, load {load[0]:.1f} -> {load[1]:.1f}, {record['caches']}. "
               "Client work of one round per configuration (the sampled clients' K local steps and "
               "their weighted sum).\n\n" + table(rows) + "\n")
    if args.speeds:
        write_file(args.speeds, json.dumps({"command": command, "accelerators": speeds(rows)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
