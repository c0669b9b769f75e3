"""XLA_FLAGS screened before anything loads JAX: XLA aborts the whole process on a flag it
does not know ("Unknown flag in XLA_FLAGS") when its first backend starts, which no
try/except catches, and fco_ray's rule modules may start it on import. `screen()` (called by
`import fco_ray` where XLA_FLAGS holds anything but fco-ray's own value) tries the flags in
a fresh subprocess, once per process and value; flags that stop XLA are removed from this
process's environment (so JAX loads with its defaults) and recorded in `DROPPED`: `device:
auto` then runs the NumPy engine with a note, and `jax-cpu` / `cuda` are refused naming
them (fco_ray/backends/device/environment.py). Flags a probe accepted are recorded in the
environment (`SCREENED`), so the processes this one starts with them (a sweep's Ray workers
and trials, a command) skip the probe: 0.7 s of starting JAX each on 2 cores.
Light: no JAX, no NumPy."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from .errors import short_repr

#: XLA's CPU thread pool of one thread (its default takes every core). Flags only: XLA ignores
#: a word that is not a --flag and every flag after it (an earlier value ended in
#: "intra_op_parallelism_threads=1", which hid any flag a user appended)
ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"
#: the flags removed by `screen` and why, or None
DROPPED: tuple[str, str] | None = None

#: XLA_FLAGS values known good (fco-ray's own), never probed
_SAFE_FLAGS = {"", ONE_THREAD}
#: the environment variable holding the XLA_FLAGS value a probe started JAX with: a process
#: that inherits both (the same value) does not probe again
SCREENED = "FCO_RAY_XLA_FLAGS_SCREENED"
#: XLA_FLAGS value -> what the probe found (None: JAX started), per process
_PROBED: dict[str, str | None] = {}
_PROBE = "import jax; jax.devices('cpu')"
PROBE_TIMEOUT_S = 120


def _xla_flags_trouble(flags: str) -> str | None:
    """Start JAX in a fresh process with `flags` (once per process and value): XLA aborts on
    an unknown flag, and must abort the probe, not this process."""
    if flags not in _PROBED:
        env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
        try:
            done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                                  text=True, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _PROBED[flags] = f"JAX did not start within {PROBE_TIMEOUT_S} s with XLA_FLAGS={short_repr(flags)}"
        else:
            if done.returncode == 0:
                _PROBED[flags] = None
                os.environ[SCREENED] = flags  # inherited by the processes started from here
            else:
                lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
                said = next((line for line in lines if "XLA_FLAGS" in line or "flag" in line.lower()),
                            lines[-1] if lines else f"exit code {done.returncode}")
                said = re.sub(r"^[FEWI]\d{4} [\d:.]+\s+\d+ \S+\] ", "", said)  # glog's prefix
                _PROBED[flags] = (f"XLA_FLAGS={short_repr(flags)} stops JAX (a process starting "
                                  f"it exits {done.returncode}: {said[:200]})")
    return _PROBED[flags]




def known_good(flags: str) -> bool:
    """Whether JAX is known to start with XLA_FLAGS=`flags` without a probe: fco-ray's own
    values, and the value a probe of this process or of the one that started it accepted."""
    return flags in _SAFE_FLAGS or os.environ.get(SCREENED) == flags


def screen() -> None:
    """Remove XLA_FLAGS that would abort JAX from this process's environment (see above)."""
    global DROPPED
    flags = os.environ.get("XLA_FLAGS", "").strip()
    if known_good(flags) or "jax" in sys.modules:
        return
    trouble = _xla_flags_trouble(flags)
    if trouble is not None:
        DROPPED = (flags, trouble)
        del os.environ["XLA_FLAGS"]
