"""fco_ray.runtime.heap: freed memory stays in the process that runs client steps."""
import subprocess
import sys
import textwrap

import pytest

from fco_ray.backends import LocalBackend
from fco_ray.runtime import heap

FAULTS = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from fco_ray.runtime.heap import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    def step():  # what a local step does: temporaries of a few MiB, allocated and freed
        a = np.ones((10, 40_000))
        b = np.sort(-a, axis=-1)
        c = np.cumsum(b, axis=-1) + a
        return float(c[0, 0])
    step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        step()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    """Page faults are counted, not timed: 50 steps of 3 MiB temporaries fault their pages in
    every step by default (glibc trims the freed heap top) and hardly at all once kept."""
    default, kept = _faults("default"), _faults("keep")
    assert default > 50 * 700  # ~3 MiB of fresh pages per step
    assert kept < default / 20


def test_the_local_backend_keeps_freed_memory(monkeypatch):
    calls = []
    monkeypatch.setattr("fco_ray.backends.local.keep_freed_memory", lambda: calls.append(1))
    LocalBackend(problem=None)
    assert calls == [1]


def test_elsewhere_than_linux_it_does_nothing(monkeypatch):
    monkeypatch.setattr(heap.sys, "platform", "darwin")
    assert heap.keep_freed_memory() is False
