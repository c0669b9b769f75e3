"""Where an E1 round's time goes: the compiled gradient against its alternatives, and the
pieces of a local step and of a round (the numbers quoted in benchmarks/README.md).

    .venv/bin/python benchmarks/step_profile.py [--out benchmarks/results/step_profile.md] [--quick]

E1 paper settings: d = 1024, 64 clients x 128 samples, FedDualAvg, K = 10, B = 10, 10
clients per round. "Cold" rows are drawn uniformly from all 8192 rows (64 MB, beyond the
caches), as the first steps of a round meet them; "hot" rows are the same 100 rows every
call. Medians of many calls; nothing is asserted.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from numba import njit

ROOT = Path(__file__).resolve().parents[1]
from fco_ray.algorithms import ALGORITHMS  # noqa: E402
from fco_ray.backends import make_backend  # noqa: E402
from fco_ray.core.engine import run_rounds  # noqa: E402
from fco_ray.core.group import make_group  # noqa: E402
from fco_ray.ops import kernels  # noqa: E402
from fco_ray.ops.random import Key  # noqa: E402
from fco_ray.ops.tree import axpy, stack  # noqa: E402
from fco_ray.problems import PROBLEMS  # noqa: E402
from fco_ray.runtime.files import write_file  # noqa: E402


@njit(cache=True, fastmath={"reassoc", "contract"})
def one_row_at_a_time(x, y, flat, w, b, scale):
    """The gradient kernel without the four-rows-at-a-time blocking (for comparison)."""
    clients, batch = flat.shape
    gw = np.zeros((clients, x.shape[1]))
    gb = np.empty(clients)
    for c in range(clients):
        total = 0.0
        for j in range(batch):
            row = x[flat[c, j]]
            r = 0.0
            for p in range(x.shape[1]):
                r += row[p] * w[c, p]
            r = (r + b[c] - y[flat[c, j]]) * scale
            total += r
            for p in range(x.shape[1]):
                gw[c, p] += r * row[p]
        gb[c] = total
    return gw, gb


def take_and_matmul(x, y, flat, w, b, scale):
    """What `LinearRegression.grad` did before the kernels: gather, then two BLAS passes."""
    xb, yb = x.take(flat, axis=0), y.take(flat)
    resid = np.matmul(xb, w[:, :, None])[..., 0] + b[:, None] - yb
    resid *= scale
    return np.matmul(resid[:, None, :], xb)[:, 0], resid.sum(axis=1)


def median_us(fn, make_args, calls: int) -> float:
    fn(*make_args())
    times = []
    for _ in range(calls):
        args = make_args()
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e6)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="default benchmarks/results/step_profile.md")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2000, help="rounds of the timed run")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 30 calls, 50 rounds, the results in a temporary directory "
                         "unless --out names one")
    args = ap.parse_args(argv)
    if args.quick:
        args.calls, args.rounds = 30, 50
    args.out = args.out or str((Path(tempfile.mkdtemp(prefix="fco-bench-")) if args.quick else
                                ROOT / "benchmarks" / "results") / "step_profile.md")
    spec = PROBLEMS["lasso"]
    spec.build(spec.params(name="lasso"), 1)  # imports and first calls
    t = time.perf_counter()
    problem = spec.build(spec.params(name="lasso"), 0)
    build_s = time.perf_counter() - t
    x = problem.train.arrays["x"].reshape(-1, 1024)
    y = problem.train.arrays["y"].reshape(-1)
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((10, 1024)) * 0.01, np.zeros(10)
    hot = rng.integers(0, len(x), size=(10, 10))

    def cold_args():
        return x, y, rng.integers(0, len(x), size=(10, 10)), w, b, 0.1

    def hot_args():
        return x, y, hot, w, b, 0.1

    rows = []
    for name, fn in (("kernels.linear_grad (4 rows at a time)", kernels.linear_grad),
                     ("one row at a time (numba)", one_row_at_a_time),
                     ("take + 2 matmuls (NumPy, before)", take_and_matmul)):
        rows.append((name, median_us(fn, cold_args, args.calls), median_us(fn, hot_args, args.calls)))

    # the pieces of one FedDualAvg local step, on 10 clients (hot data)
    ids = np.arange(10) * 6
    key = Key(0, 3, ids, 2)
    z = stack(problem.init_params(None), 10)
    g = problem.grad(z, ids, key, 10)
    pieces = [
        ("LinearRegression.grad (draw + compiled gradient)", lambda: problem.grad(z, ids, key, 10)),
        ("psi.prox (Blockwise l1, soft threshold)", lambda: problem.psi.prox(z, 0.01)),
        ("axpy (dual update)", lambda: axpy(-0.001, g, z)),
        ("Key.with_step", lambda: key.with_step(3)),
    ]
    step = [(name, median_us(fn, lambda: (), args.calls)) for name, fn in pieces]

    # a round: inside client_update vs the rest (sampling, aggregation, server update)
    cls = ALGORITHMS["feddualavg"]
    algorithm = cls(cls.Hyper(name="feddualavg", client_lr=1e-3, server_lr=1.0))
    inner = algorithm.client_update
    spent = [0.0]

    def timed_update(*a, **k):
        t = time.perf_counter()
        out = inner(*a, **k)
        spent[0] += time.perf_counter() - t
        return out

    algorithm.client_update = timed_update
    group = make_group([algorithm])
    backend = make_backend({"name": "local"}, problem)
    run_rounds(problem, group, backend, rounds=args.rounds // 10, eval_every=10**6, seed=0)
    spent[0] = 0.0
    n = args.rounds
    t = time.perf_counter()
    run_rounds(problem, group, backend, rounds=n, eval_every=10**6, seed=0)
    total = (time.perf_counter() - t) / n * 1e6
    update = spent[0] / n * 1e6

    lines = [f"# E1 step profile, {_dt.datetime.now().isoformat(timespec='seconds')}", "",
             f"Command: `.venv/bin/python benchmarks/step_profile.py`; load average "
             f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; medians of {args.calls} calls.", "",
             "## Gradient of one local step (10 clients x 10 rows, d = 1024)", "",
             "| implementation | cold rows us | hot rows us |", "|---|---|---|"]
    lines += [f"| {name} | {cold:.1f} | {hot_:.1f} |" for name, cold, hot_ in rows]
    lines += ["", "## Pieces of a FedDualAvg local step (10 clients, hot data)", "",
              "| piece | us |", "|---|---|"]
    lines += [f"| {name} | {us:.1f} |" for name, us in step]
    lines += ["", f"## A round ({args.rounds} rounds, evaluations at the start and end only)", "",
              f"- whole round: {total:.0f} us",
              f"- inside `client_update` (10 local steps of 10 clients): {update:.0f} us",
              f"- the rest (client sampling, aggregation, server update, engine): {total - update:.0f} us", "",
              f"Building the E1 problem (data of 64 + 16 clients): {build_s:.2f} s.", ""]
    text = "\n".join(lines)
    write_file(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
