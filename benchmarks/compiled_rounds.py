"""Whole rounds compiled (the device backend on JAX's CPU platform) beside the NumPy/numba
engine, on this machine's CPU: per configuration-round wall times of the same groups.

    python benchmarks/compiled_rounds.py --out benchmarks/results        # ~3 minutes, 2 cores
    python benchmarks/compiled_rounds.py --quick                         # a smoke run (seconds)

Each case runs a group of G configurations through `fco_ray.core.plan.prepare(...).run`
(the engine's round loop, as `fco_ray.run` / `run_grid` do) with an evaluation every E rounds;
the wall time between two evaluations, divided by E x G, is one sample (the first interval,
which holds the compilation, is left out). Both engines run in one process, one after the
other, for each case; reported: min and median over the samples, and the load average.
Writes compiled_rounds.json and compiled_rounds.md under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # both engines single-threaded BLAS
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's fco_ray

E1 = ({"name": "lasso"}, {"name": "feddualavg", "local_steps": 10, "batch_size": 10, "clients_per_round": 10})
E5 = ({"name": "bilinear_l1", "data_seed": 0},
      {"name": "feddualex", "local_steps": 10, "batch_size": None, "clients_per_round": None})
QUICK_E1 = ({"name": "lasso", "clients": 12, "samples_per_client": 16, "dim": 32, "support": 4,
             "val_clients": 2}, E1[1])
QUICK_E5 = ({"name": "bilinear_l1", "n": 20, "m": 30, "clients": 6, "data_seed": 0}, E5[1])


def cases(quick: bool) -> list[dict]:
    if quick:
        return [{"label": "E1 FedDualAvg", "spec": QUICK_E1, "G": 1, "every": 2, "laps": 2},
                {"label": "E5 l1 FeDualEx", "spec": QUICK_E5, "G": 3, "every": 2, "laps": 2}]
    return [{"label": "E1 FedDualAvg", "spec": E1, "G": 1, "every": 20, "laps": 6},
            {"label": "E1 FedDualAvg", "spec": E1, "G": 35, "every": 10, "laps": 4},
            {"label": "E5 l1 FeDualEx", "spec": E5, "G": 10, "every": 4, "laps": 3}]


def configs(spec, g: int, every: int, laps: int, device: str) -> list:
    from fco_ray.core.config import parse_run

    problem, algorithm = spec
    saddle = problem["name"].startswith("bilinear")
    rates = [0.01] if g == 1 and saddle else [0.001] if g == 1 else (
        np.geomspace(1e-3, 0.3, g) if saddle else np.geomspace(1e-5, 2e-3, g))
    return [parse_run({"problem": problem, "algorithm": {**algorithm, "client_lr": float(lr)},
                       "rounds": every * (1 + laps), "eval_every": every, "seed": 0,
                       "backend": {"name": "local", "device": device}}) for lr in rates]


def measure(case: dict, device: str) -> dict:
    from fco_ray.core.plan import prepare

    g, every = case["G"], case["every"]
    prepared = prepare(configs(case["spec"], g, every, case["laps"], device))
    stamps: list[float] = []
    prepared.run(lambda rnd, rows, ended: stamps.append(time.perf_counter()))
    per = np.diff(stamps)[1:] / (every * g)  # the first interval holds the compilation
    return {"case": case["label"], "G": g, "engine": "numba (cpu)" if device == "cpu" else "compiled rounds (jax-cpu)",
            "per_config_round_min_ms": float(per.min() * 1e3),
            "per_config_round_median_ms": float(np.median(per) * 1e3), "samples": len(per),
            "load": os.getloadavg()[0]}


def write(out: Path, rows: list[dict], command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "compiled_rounds.json").write_text(json.dumps({"command": command, "rows": rows,
                                                          "machine": platform.processor() or platform.machine(),
                                                          "cores": os.cpu_count()}, indent=1))
    lines = ["# Whole rounds compiled (JAX, CPU) beside the numba engine", "",
             f"Written by `{command}` ({os.cpu_count()} cores). Per configuration-round wall time "
             "between two evaluations (first interval, with the compilation, left out).", "",
             "| case | G | engine | min ms | median ms | samples | load |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['G']} | {r['engine']} | {r['per_config_round_min_ms']:.3f} | "
                     f"{r['per_config_round_median_ms']:.3f} | {r['samples']} | {r['load']:.2f} |")
    pairs = {}
    for r in rows:
        pairs.setdefault((r["case"], r["G"]), {})[r["engine"].split()[0]] = r
    lines += ["", "| case | G | compiled / numba (min) | (median) |", "|---|---|---|---|"]
    for (case, g), p in pairs.items():
        if len(p) == 2:
            lines.append(f"| {case} | {g} | {p['compiled']['per_config_round_min_ms'] / p['numba']['per_config_round_min_ms']:.2f}x | "
                         f"{p['compiled']['per_config_round_median_ms'] / p['numba']['per_config_round_median_ms']:.2f}x |")
    (out / "compiled_rounds.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the record (--quick: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="small problems, seconds: a smoke run")
    args = ap.parse_args(argv)
    if args.out is None:
        if not args.quick:
            ap.error("--out is required (or --quick)")
        import tempfile

        args.out = Path(tempfile.mkdtemp(prefix="fco-bench-"))
    command = "python benchmarks/compiled_rounds.py" + (" --quick" if args.quick else "") + f" --out {args.out}"
    rows = []
    for case in cases(args.quick):
        for device in ("cpu", "jax-cpu"):
            rows.append(measure(case, device))
            print(json.dumps(rows[-1]), flush=True)
            write(args.out, rows, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
