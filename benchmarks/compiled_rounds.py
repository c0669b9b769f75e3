"""Whole rounds compiled (the device backend on JAX's CPU platform) beside the NumPy/numba
engine, on this machine's CPU: per configuration-round wall times of the same groups, for each
family of (algorithm, problem) pairs that has rules (fco_ray/rules).

    python benchmarks/compiled_rounds.py --out benchmarks/results        # ~5 minutes idle, 2 cores
    python benchmarks/compiled_rounds.py --out DIR --cases E2,E6        # only these cases, into DIR's record
    python benchmarks/compiled_rounds.py --quick                         # a smoke run (seconds)
    python benchmarks/compiled_rounds.py --out benchmarks/results --speeds fco_ray/backends/speeds.json
        # ... and the table from which `backend.device: auto` picks its engine (fco_ray/backends/choice.py)

The families, at the sizes of their shipped sweep files (sweeps/*.yaml: problem defaults, the
sweep's K, batch and participation), alone (G = 1) and fused as the sweep forms its Tune trials
(one algorithm's rate pairs of one seed: G = 42 for E1 and E2, 35 for E5 l1, 45 for E6; E5
nuclear's 45 bounded to 4, since its rounds take seconds per member on this CPU and a case
should take < 2 minutes; E1 also at G = 35 and E5 l1 at G = 10, the earlier record's cases):
  E1 lasso, FedDualAvg; E2 lowrank (nuclear-norm least squares), FedDualAvg;
  E5 bilinear_l1 and bilinear_nuclear, FeDualEx (K = 10, full participation);
  E6 adversarial, FeDualEx (K = 5, batch 10, full participation, lam 0.003, radius 0.05).
A group's members differ in the client rate only, spread geometrically over a range where every
member stays finite (the record counts the members that finished), not the sweep's grid (whose
diverging members would leave the group early and change G).

Each case runs a group of G configurations through `fco_ray.core.plan.prepare(...).run`
(the engine's round loop, as `fco_ray.run` / `run_grid` do) with an evaluation every E rounds;
the wall time between two evaluations, divided by E x G, is one sample (the first interval,
which holds the compilation, is left out). Both engines run in one process, one after the
other, for each case; reported: min and median over the samples, the 1-minute load average
before and after each measurement, and which engine is faster (by the median).
Writes compiled_rounds.json and compiled_rounds.md under --out; with --cases, the rows of the
other cases already recorded there are kept (each row names the command that measured it).
With --speeds PATH, also the engine choice's table from the whole record (`speeds`): per case
the two engines' median ms per configuration-round and the compilation's seconds, estimated
from the first interval as (compiled's first interval - its rounds' share) - (numba's first
interval - its rounds' share), i.e. what the compiled engine adds before its first rows.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # both engines single-threaded BLAS
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402

E1 = ({"name": "lasso"}, {"name": "feddualavg", "local_steps": 10, "batch_size": 10, "clients_per_round": 10})
E2 = ({"name": "lowrank"}, E1[1])
SADDLE = {"name": "feddualex", "local_steps": 10, "batch_size": None, "clients_per_round": None}
E5 = ({"name": "bilinear_l1", "data_seed": 0}, SADDLE)
E5N = ({"name": "bilinear_nuclear", "data_seed": 0}, SADDLE)
E6 = ({"name": "adversarial", "lam": 0.003, "radius": 0.05, "clients": 100, "data_seed": 0},
      {"name": "feddualex", "local_steps": 5, "batch_size": 10, "clients_per_round": None})
QUICK_E1 = ({"name": "lasso", "clients": 12, "samples_per_client": 16, "dim": 32, "support": 4,
             "val_clients": 2}, E1[1])
QUICK_E5 = ({"name": "bilinear_l1", "n": 20, "m": 30, "clients": 6, "data_seed": 0}, E5[1])
#: client rates: (a lone run's, a group's range) where every member stays finite
LINEAR_RATES, SADDLE_RATES = (0.001, (1e-5, 2e-3)), (0.01, (1e-3, 0.3))


def case(label, spec, g, every, laps, rates) -> dict:
    return {"label": label, "spec": spec, "G": g, "every": every, "laps": laps, "rates": rates}


def cases(quick: bool) -> list[dict]:
    if quick:
        return [case("E1 FedDualAvg", QUICK_E1, 1, 2, 2, LINEAR_RATES),
                case("E5 l1 FeDualEx", QUICK_E5, 3, 2, 2, SADDLE_RATES)]
    return [case("E1 FedDualAvg", E1, 1, 20, 6, LINEAR_RATES),
            case("E1 FedDualAvg", E1, 35, 10, 4, LINEAR_RATES),
            case("E1 FedDualAvg", E1, 42, 10, 4, LINEAR_RATES),
            case("E2 lowrank FedDualAvg", E2, 1, 10, 4, (0.001, (1e-4, 1e-2))),
            case("E2 lowrank FedDualAvg", E2, 42, 2, 3, (0.001, (1e-4, 1e-2))),
            case("E5 l1 FeDualEx", E5, 1, 4, 4, SADDLE_RATES),
            case("E5 l1 FeDualEx", E5, 10, 4, 3, SADDLE_RATES),
            case("E5 l1 FeDualEx", E5, 35, 2, 3, SADDLE_RATES),
            case("E5 nuclear FeDualEx", E5N, 1, 2, 3, SADDLE_RATES),
            # the sweep fuses 45; a round costs seconds per member here: 4, so the case stays < 2 min
            case("E5 nuclear FeDualEx", E5N, 4, 1, 2, SADDLE_RATES),
            case("E6 adversarial FeDualEx", E6, 1, 5, 5, SADDLE_RATES),
            case("E6 adversarial FeDualEx", E6, 45, 2, 4, SADDLE_RATES)]


def configs(case: dict, device: str) -> list:
    from fco_ray.core.config import parse_run

    (problem, algorithm), g, every = case["spec"], case["G"], case["every"]
    lone, (lo, hi) = case["rates"]
    rates = [lone] if g == 1 else np.geomspace(lo, hi, g)
    return [parse_run({"problem": problem, "algorithm": {**algorithm, "client_lr": float(lr)},
                       "rounds": every * (1 + case["laps"]), "eval_every": every, "seed": 0,
                       "backend": {"name": "local", "device": device}}) for lr in rates]


def measure(case: dict, device: str) -> dict:
    from fco_ray.core.plan import prepare

    g, every = case["G"], case["every"]
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    prepared = prepare(configs(case, device))  # one group of G members
    stamps: list[float] = []
    results = prepared.run(lambda rnd, rows, ended: stamps.append(time.perf_counter()))
    per = np.diff(stamps)[1:] / (every * g)  # the first interval holds the compilation
    return {"case": case["label"], "G": g, "engine": "numba (cpu)" if device == "cpu" else "compiled rounds (jax-cpu)",
            "per_config_round_min_ms": float(per.min() * 1e3),
            "per_config_round_median_ms": float(np.median(per) * 1e3), "samples": len(per),
            "finished": sum(r.status == "finished" for r in results), "every": every,
            "first_interval_s": float(stamps[1] - t0), "load_before": load_before,
            "load": os.getloadavg()[0]}


def pairs(rows: list[dict]) -> dict:
    """(case, G) -> {"numba": row, "compiled": row}, in the rows' order."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["case"], r["G"]), {})[r["engine"].split()[0]] = r
    return out


def case_work(problem: dict, algorithm: dict) -> int:
    """A case's round work per configuration (`fco_ray.core.plan.round_work`: what the
    engine choice scales by)."""
    from fco_ray.core.config import parse_run
    from fco_ray.core.plan import build, round_work

    cfg = parse_run({"problem": problem, "algorithm": algorithm})
    return round_work(cfg, build(cfg))


def speeds(rows: list[dict]) -> list[dict]:
    """The engine choice's table (fco_ray/backends/choice.py) from the record's rows: per case
    its evaluation interval (`every`: rounds per compiled call), round work, both engines'
    median ms per configuration-round and the compilation's seconds."""
    specs = {c["label"]: c["spec"] for c in cases(False)}
    works: dict[str, int] = {}  # a case's round work, by label (each problem built once)
    out = []
    for (label, g), p in pairs(rows).items():
        if len(p) < 2 or label not in specs:
            continue
        n, c = p["numba"], p["compiled"]
        rounds_s = {k: r["every"] * g * r["per_config_round_median_ms"] / 1e3 for k, r in p.items()}
        compile_s = (c["first_interval_s"] - rounds_s["compiled"]) - (n["first_interval_s"] - rounds_s["numba"])
        problem, algorithm = specs[label]
        if label not in works:
            works[label] = case_work(problem, algorithm)
        out.append({"case": label, "problem": problem["name"], "algorithm": algorithm["name"], "G": g,
                    "every": c["every"], "work": works[label],
                    "numpy_ms": round(n["per_config_round_median_ms"], 4),
                    "compiled_ms": round(c["per_config_round_median_ms"], 4),
                    "compile_s": round(max(0.0, compile_s), 3)})
    # the estimate moves with what ran before it in the process (a problem built, a cold
    # start): a pair's cases take its largest, so none under-counts the compilation
    for row in out:
        row["compile_s"] = max(r["compile_s"] for r in out
                               if (r["problem"], r["algorithm"]) == (row["problem"], row["algorithm"]))
    return out


def write_speeds(path: Path, record: Path) -> None:
    data = json.loads(record.read_text())
    cases = ",\n  ".join(json.dumps(c) for c in speeds(data["rows"]))  # a line per case
    measured = "; ".join(dict.fromkeys(r.get("command", data["command"]) for r in data["rows"]))
    written = json.dumps(f"python benchmarks/compiled_rounds.py --speeds, from {record.as_posix()} "
                         f"(measured by: {measured})")
    write_file(path, f'{{"written_by": {written},\n "cases": [\n  {cases}\n ]}}\n')


def write(out: Path, rows: list[dict], command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_file(out / "compiled_rounds.json", json.dumps({"command": command, "rows": rows,
                                                          "machine": platform.processor() or platform.machine(),
                                                          "cores": os.cpu_count()}, indent=1))
    lines = ["# Whole rounds compiled (JAX, CPU) beside the numba engine", "",
             "Written by " + ", ".join(f"`{c}`" for c in dict.fromkeys(r.get("command", command) for r in rows))
             + f" ({os.cpu_count()} cores). Per configuration-round wall time "
             "between two evaluations (every E rounds; first interval, with the compilation, left "
             "out); the 1-minute load average before and after each measurement.", "",
             "| case | G (finished) | E | engine | min ms | median ms | samples | load before / after |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['G']} ({r.get('finished', '?')}) | {r.get('every', '?')} | {r['engine']} | "
                     f"{r['per_config_round_min_ms']:.3f} | {r['per_config_round_median_ms']:.3f} | {r['samples']} | "
                     f"{r.get('load_before', float('nan')):.2f} / {r['load']:.2f} |")
    lines += ["", "| case | G | compiled / numba (min) | (median) | faster (median) |", "|---|---|---|---|---|"]
    for (case, g), p in pairs(rows).items():
        if len(p) == 2:
            ratio = p["compiled"]["per_config_round_median_ms"] / p["numba"]["per_config_round_median_ms"]
            lines.append(f"| {case} | {g} | {p['compiled']['per_config_round_min_ms'] / p['numba']['per_config_round_min_ms']:.2f}x | "
                         f"{ratio:.2f}x | {'compiled rounds' if ratio < 1 else 'numba'} |")
    write_file(out / "compiled_rounds.md", "\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the record (--quick: a temporary one)")
    ap.add_argument("--cases", default="", help="only the cases whose label contains one of these "
                    "comma-separated words (e.g. E2,E6); default: all")
    ap.add_argument("--quick", action="store_true", help="small problems, seconds: a smoke run")
    ap.add_argument("--speeds", type=Path, help="also write the engine choice's table here "
                    "(fco_ray/backends/speeds.json) from the record under --out")
    ap.add_argument("--speeds-only", action="store_true", help="measure nothing: only --speeds "
                    "from the record already under --out")
    args = ap.parse_args(argv)
    if args.speeds_only:
        if args.speeds is None or args.out is None:
            ap.error("--speeds-only needs --speeds and --out")
        write_speeds(args.speeds, args.out / "compiled_rounds.json")
        return 0
    if args.out is None:
        if not args.quick:
            ap.error("--out is required (or --quick)")
        import tempfile

        args.out = Path(tempfile.mkdtemp(prefix="fco-bench-"))
    command = ("python benchmarks/compiled_rounds.py" + (" --quick" if args.quick else "")
               + (f" --cases {shlex.quote(args.cases)}" if args.cases else "") + f" --out {args.out}"
               + (f" --speeds {args.speeds}" if args.speeds else ""))
    words = [w for w in args.cases.split(",") if w]
    chosen = [c for c in cases(args.quick) if not words or any(w in c["label"] for w in words)]
    rows = []
    record = args.out / "compiled_rounds.json"
    if words and record.exists():  # keep the other cases' rows
        old = json.loads(record.read_text())
        labels = {c["label"] for c in chosen}
        rows = [{"command": old["command"], **r} for r in old["rows"] if r["case"] not in labels]
    for c in chosen:
        for device in ("cpu", "jax-cpu"):
            rows.append({"command": command, **measure(c, device)})
            print(json.dumps(rows[-1]), flush=True)
            write(args.out, rows, command)
    if args.speeds is not None:
        write_speeds(args.speeds, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
