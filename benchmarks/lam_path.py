"""A lam path run one value at a time in one process: the runs after the first reuse the
compiled rule programs (`fco_ray.rules.host`: psi's weight is an argument of the programs, not
one of their settings), beside a stand-in for one compilation per lam.

    .venv/bin/python benchmarks/lam_path.py [--repeats 3] [--out benchmarks/results/lam_path.md]
    .venv/bin/python benchmarks/lam_path.py --quick   # one repeat, two lams, a temporary record

Each repeat runs the path twice, interleaved, on the CPU engine (`device: cpu`): "programs
shared" as fco-ray runs it; "compiled anew per lam" with `host`'s shared pieces dropped before
each lam, so each lam makes new programs and JAX traces and lowers them again: what every lam
paid when lam was one of the programs' settings (JAX's own caches of compiled executables
serve both cases alike). The first lam of each path compiles in both cases
and is left out. The record (`lam_path.json`) holds every run's seconds; the page the
minimum and median.
"""
from __future__ import annotations

import sys
import time

from benchmarks.record import header, load, min_median_table, options, write

#: a small E1-like lasso (the programs' cost, not the data's, is what differs)
PROBLEM = {"name": "lasso", "dim": 64, "clients": 16, "samples_per_client": 32, "support": 8, "val_clients": 2}
ALGORITHM = {"name": "feddualavg", "client_lr": 0.01, "server_lr": 1.0, "local_steps": 5, "batch_size": 8,
             "clients_per_round": 8}
LAMS = (0.02, 0.05, 0.1, 0.2, 0.5)
CASES = ("programs shared", "compiled anew per lam")


def path(lams, anew: bool) -> list[float]:
    """Seconds of each run after the first, along `lams`."""
    import fco_ray
    from fco_ray.rules import host

    seconds = []
    for i, lam in enumerate(lams):
        if anew:
            host._shared.cache_clear()
            host._shared_broadcast.cache_clear()
        start = time.perf_counter()
        fco_ray.run({"problem": {**PROBLEM, "lam": lam}, "algorithm": ALGORITHM, "rounds": 20, "eval_every": 10,
                     "backend": {"name": "local", "device": "cpu"}})
        if i:
            seconds.append(round(time.perf_counter() - start, 4))
    return seconds


def page(r: dict) -> str:
    lines = [f"# A lam path, one value at a time, {r['date']}", "",
             f"Written by `{r['command']}` (commit {r['commit']}, {r['cpus']} x {r['cpu']}; {r['repeats']} "
             f"paths per case, interleaved, lams {r['lams']}, 20 rounds each on the CPU engine; load average "
             f"{r['load_before']} before, {r['load_after']} after). Seconds of each run after the path's "
             "first (which compiles in both cases).", "",
             *min_median_table(r["cases"], "run", 3)]
    return "\n".join(lines) + "\n"


def main() -> int:
    args = options(__doc__, "lam_path", 3, "one repeat of two lams")
    repeats, lams = args.repeats, (LAMS[:2] if args.quick else LAMS)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    before = load()
    path(lams[:1], anew=False)  # imports and the first compilation, not timed
    for _ in range(repeats):
        for name in CASES:
            times[name] += path(lams, anew=name == CASES[1])
        print({k: v[-1] for k, v in times.items()}, flush=True)
    record = {**header(args.command),
              "repeats": repeats, "lams": list(lams), "load_before": before, "load_after": load(), "cases": times}
    write(args.out, record, page(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
