"""Sweeps: a sweep file (schema.py) -> the runtime sweep (sweep.py), checked by the driver
(checks.py: `load_sweep`) -> Ray Tune trials (trainable.py) logged to MLflow from the driver
(logging.py), orchestrated and resumed by `run_sweep` (run.py).

Imported on first use, as in `fco_ray/__init__.py`: reading and checking a sweep file
(`load_sweep`) loads neither Ray, MLflow nor pandas, so a bad file is answered at once."""
from importlib import import_module

__all__ = ["Sweep", "SweepInterrupted", "SweepOutcome", "load_sweep", "read_sweep_file", "run_sweep"]
_LAZY = {"SweepInterrupted": ".run", "SweepOutcome": ".run", "run_sweep": ".run",
         "Sweep": ".sweep", "load_sweep": ".checks", "read_sweep_file": ".schema"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module 'fco_ray.sweep' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
