"""One engine whose unit is a group: a lone E1 run's per-round time, this checkout beside an
earlier one (the two-loop engine), interleaved A, B, A, B, ... in fresh processes so that both
see the same load.

    .venv/bin/python benchmarks/engine_unit.py --baseline DIR [--rounds R] [--repeats N] [--out FILE]
    .venv/bin/python benchmarks/engine_unit.py --quick  (a smoke run: this checkout against itself)

DIR is another checkout of fco-ray (e.g. `git worktree add /tmp/fco-base a73aa4f`). Each sample
is one process that runs `fco_ray.run` on E1 (lasso at the paper's defaults, FedDualAvg at the
paper's rates, local backend, no MLflow) for R rounds after one warm-up run (numba compiles),
and reports the seconds per round of the timed run (set-up excluded: the time between the
round-0 row and the last row). Reported: min and median per round of each, their ratio, and
the machine's load. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from fco_ray.runtime.files import write_file

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import fco_ray
rounds = int(sys.argv[2])
config = {"problem": {"name": "lasso"}, "seed": 0, "rounds": rounds, "eval_every": rounds,
          "algorithm": {"name": "feddualavg", "client_lr": 0.01, "server_lr": 1.0}}
fco_ray.run({**config, "rounds": 5, "eval_every": 5})  # compile, caches
stamps = []
fco_ray.run(config, on_eval=lambda row: stamps.append(time.perf_counter()))
print(json.dumps({"per_round": (stamps[-1] - stamps[0]) / rounds, "file": fco_ray.__file__}))
"""


def sample(checkout: Path, rounds: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", PROBE, str(checkout), str(rounds)], env=env,
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["file"].startswith(str(checkout)):
        raise RuntimeError(f"{checkout}: imported fco_ray from {result['file']}")
    return result["per_round"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=None, help="required but with --quick")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/engine_unit.md")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 20 rounds, one sample each, this checkout as the baseline "
                             "unless --baseline names one, the results in a temporary directory "
                             "unless --out names one")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.repeats, args.baseline = 20, 1, args.baseline or ROOT
    elif args.baseline is None:
        parser.error("--baseline is required (or --quick)")
    args.out = args.out or (Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                            ROOT / "benchmarks" / "results") / "engine_unit.md"
    started, load0 = _dt.datetime.now(), os.getloadavg()
    times: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(args.repeats):
        for name, checkout in (("baseline", args.baseline.resolve()), ("this", ROOT)):
            times[name].append(sample(checkout, args.rounds))
    load1 = os.getloadavg()
    base, this = times["baseline"], times["this"]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    base_commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True).stdout.strip()
    lines = [
        f"# A lone E1 run per round: one engine (groups) vs the two-loop engine ({started:%Y-%m-%d %H:%M})",
        "",
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`  ",
        f"This checkout {commit} vs baseline {base_commit}; E1 lasso (paper defaults), FedDualAvg "
        f"(0.01, 1), {args.rounds} rounds per sample, {args.repeats} samples each, interleaved, "
        f"each in a fresh process after a warm-up run.  ",
        f"Load (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after; {os.cpu_count()} CPUs.",
        "",
        "| engine | min ms/round | median ms/round |",
        "|---|---|---|",
        f"| baseline ({base_commit}) | {1e3 * min(base):.3f} | {1e3 * median(base):.3f} |",
        f"| this ({commit}) | {1e3 * min(this):.3f} | {1e3 * median(this):.3f} |",
        f"| this / baseline | {min(this) / min(base):.3f} | {median(this) / median(base):.3f} |",
        "",
        "Samples (ms/round): baseline " + ", ".join(f"{1e3 * t:.3f}" for t in base)
        + "; this " + ", ".join(f"{1e3 * t:.3f}" for t in this),
    ]
    write_file(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
