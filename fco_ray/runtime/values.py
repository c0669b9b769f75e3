"""Values at the entries: what a sweep file, `--set` and the Python API may hand in, checked
by the same rules wherever it comes from.

- NumPy scalars and arrays become Python numbers and lists (`plain`) where a config model
  first reads them (`runtime.strict.no_bool_numbers`, which every config model runs) and
  before a grid's values are compared, so the checks see `np.bool_(True)` as the boolean it
  is (refused where a number belongs), `np.uint64(7)` as the integer 7, `np.float64(0.01)`
  as 0.01.
- A grid (`search.grid` of a sweep file, the grid of `fco_ray.run_grid`) lists each value
  once (0.01 and np.float64(0.01) and "0.01" are the same value) and expands to at most
  MAX_CONFIGURATIONS configurations, counted before anything is expanded (`check_grid`).

Light on purpose (no NumPy import): the CLI checks its input with it before heavy imports.
"""
from __future__ import annotations

import json

from .errors import ConfigError, short_repr

MAX_CONFIGURATIONS = 20_000  # configurations of one sweep or grid (MLflow child runs, rows)


def plain(value):
    """`value` with every NumPy scalar or array in it (through dicts, lists and tuples) as the
    Python value it holds: np.bool_ -> bool, integers -> int, floats -> float, arrays -> lists."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return plain(value.tolist())  # a scalar's tolist() is its Python value
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def grid_identity(value):
    """What makes two grid values the same configuration: numbers by value (1 == 1.0), text
    that reads as a number like that number (0.01 and "0.01"), anything else by its JSON."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return ("number", float(value))
        except OverflowError:  # an integer beyond floats: itself
            return ("number", value)
    if isinstance(value, str):
        try:
            return ("number", float(value))
        except ValueError:
            return ("text", value)
    return ("json", json.dumps(value, sort_keys=True, default=str))


def check_grid_values(key: str, values) -> None:
    """ValueError unless `values` is a non-empty list holding each value once."""
    if not isinstance(values, list):
        raise ValueError(f"grid {key!r} must be a list of values, got {short_repr(values)}")
    if not values:
        raise ValueError(f"grid {key!r} has no values")
    seen: dict = {}
    for value in values:
        same = grid_identity(value)
        if same in seen:  # each would be a configuration of its own: the same one twice
            raise ValueError(f"grid {key!r} lists {short_repr(seen[same])} and {short_repr(value)}: "
                             "the same value twice (each value once)")
        seen[same] = value


def check_grid(grid, what: str = "grid") -> dict:
    """`grid` (dotted keys -> value lists) if every key's list is valid and the grid expands
    to at most MAX_CONFIGURATIONS configurations; ConfigError otherwise."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"{what} must be a non-empty mapping of dotted keys to value lists, "
                          f"got {short_repr(grid)}")
    total = 1
    for key, values in grid.items():
        try:
            check_grid_values(key, values)
        except ValueError as e:  # it names the grid and the key
            raise ConfigError(str(e)) from None
        total *= len(values)
    if total > MAX_CONFIGURATIONS:
        axes = " x ".join(f"{k} ({len(v)})" for k, v in grid.items())
        raise ConfigError(f"{what} expands to {total:,} configurations ({axes}); at most "
                          f"{MAX_CONFIGURATIONS:,}: search fewer values, or split the grid")
    return grid

