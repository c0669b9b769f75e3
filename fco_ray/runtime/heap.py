"""Keep freed memory in the process that runs client steps (glibc's malloc).

A local step allocates and frees NumPy temporaries of a few MiB (a block of clients'
stacked models: the MLP's l1-ball projection sorts and scans arrays of clients x 40,000
floats, a fused E5 group's operator products are members x clients x 600). By default glibc
gives freed memory at the top of its heap back to the system once more than a few MiB are
free there (a dynamic trim threshold), so the next step's temporaries fault their pages in
again: on the MLP that was a quarter of a local step's time, and it grew with the number of
clients per call, so a Ray actor holding half the clients paid more per client than the local
backend holding all of them (`benchmarks/results/ray_scaling_s6.md`).

`keep_freed_memory()` sets a fixed trim threshold (1 GiB: freed memory stays in the process
for reuse) and glibc's largest mmap threshold (32 MiB: larger arrays still get their own
mapping and go back to the system when freed, so one big temporary cannot pin memory). Both
backends call it in the process where client steps run (the driver for `local`, each actor
for `ray`); it only tunes the allocator and changes no number. Elsewhere than glibc (macOS,
musl) it does nothing.
"""
from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters, <malloc.h>
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 1 << 30
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)


def keep_freed_memory() -> bool:
    """Tune this process's malloc as above; True if glibc accepted both settings."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
