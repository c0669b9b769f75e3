"""Sweeps: a sweep file (schema.py) -> Ray Tune trials (trainable.py) logged to MLflow from
the driver (logging.py), orchestrated and resumed by `run_sweep` (run.py)."""
from .run import SweepInterrupted, SweepOutcome, run_sweep
from .schema import Sweep, load_sweep, read_sweep_file

__all__ = ["Sweep", "SweepInterrupted", "SweepOutcome", "load_sweep", "read_sweep_file", "run_sweep"]
