"""The device backend: whole rounds of a run or a fused group compiled as one JAX program
(fco_ray/backends/device/backend.py), on a GPU or on JAX's CPU platform.

`backend: {name: local, device: auto | cpu | cuda | jax-cpu}`:
- `auto` (default): this CPU, the NumPy/numba engine or `jax-cpu`, whichever is measured
  faster for the work (fco_ray/backends/choice.py);
- `cpu`: the NumPy/numba engine (fco_ray/backends/local.py);
- `cuda`: the rules compiled for the first GPU (needs `pip install -e '.[gpu]'`);
- `jax-cpu`: the same programs on JAX's CPU platform (the CI check of the device code).

Every (algorithm, problem) pair whose classes declare a rule in JAX (`Algorithm.rule`,
`Problem.rule`, fco_ray/rules) runs here, a user's own included (`fco_ray.core.checks.
device_pairs` lists them); a run's history equals the CPU engine's to rounding (tests: 1e-9
relative). This module imports no JAX.
"""
from __future__ import annotations

#: the devices that run compiled rounds
DEVICES = ("cuda", "jax-cpu")
