"""A fused E1 group's local step as two BLAS products: the products a group of G members
makes per step (residuals (G, d) x (d, B), gradient (G, B) x (B, d); E1: d = 1024, B = 10),
beside a large product for this core's double-precision peak. CPU time, one BLAS thread.
Where these small products run far below the large one, the group kernel
(`fco_ray.ops.kernels._group_steps`, two models at a time by hand) does better than BLAS.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/blas_floor.py [--group 35] [--quick]
"""
import argparse
import time

import numpy as np


def gflops(m: int, k: int, n: int, repeats: int) -> tuple[float, float]:
    a, b = np.random.default_rng(0).random((m, k)), np.random.default_rng(1).random((k, n))
    a @ b  # warm up
    start = time.process_time()
    for _ in range(repeats):
        a @ b
    seconds = (time.process_time() - start) / repeats
    return 2 * m * k * n / seconds / 1e9, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, default=35)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer, smaller products")
    args = parser.parse_args()
    g, d, b = args.group, args.dim, args.batch
    big, repeats = (300, 20) if args.quick else (2000, 2000)
    for m, k, n, repeats in [(big, big, big, 3), (g, d, b, repeats), (g, b, d, repeats)]:
        rate, seconds = gflops(m, k, n, repeats)
        print(f"{m} x {k} x {n}: {rate:.1f} GFLOP/s, {seconds * 1e6:.1f} us per product")


if __name__ == "__main__":
    main()
