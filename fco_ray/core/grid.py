"""`fco_ray.run_grid(config, grid)`: a grid of configurations, run fused where possible.

Configurations that share the problem, the seed, the backend and every setting except
real-valued hyperparameters of a fusable algorithm (`Algorithm.fusable`) and, where the
problem allows it, the regularizer weight `problem.lam` (`plan.group_key`) run as one fused
group (`fco_ray.core.group`): one pass over the sampled rows serves the whole group. Others run
alone. Every configuration's rows equal its own `fco_ray.run`.
"""
from __future__ import annotations

import contextlib
import copy
import itertools
from pathlib import Path

import pandas as pd

from ..backends.cluster import reuse
from ..runtime.errors import ConfigError
from ..runtime.files import load_yaml, set_key
from ..runtime.values import check_grid, plain
from .config import RunConfig, parse_run
from .plan import prepare_groups


def expand(config: dict, grid: dict[str, list]) -> list[tuple[dict, RunConfig]]:
    """Every (grid point, validated run config) of the grid, in grid order. The grid is
    checked first as a sweep file's is (`runtime.values.check_grid`: each value once, at
    most MAX_CONFIGURATIONS points, counted before anything is expanded)."""
    config, grid = plain(config), check_grid(plain(grid))
    if not isinstance(config, dict):
        raise ConfigError(f"config must be a mapping, got {type(config).__name__}")
    out = []
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values))
        raw = copy.deepcopy(config)
        for key, value in point.items():
            set_key(raw, key, value, "grid key")
        try:
            out.append((point, parse_run(raw)))
        except ConfigError as e:
            raise ConfigError(f"grid point ({', '.join(f'{k}={v}' for k, v in point.items())}): {e}") from None
    return out


def check_max_group(max_group):
    """`max_group` checked as a sweep file's `tune.fuse_max` is (the same field, the same
    message): None, or an integer from 1 to MAX_FUSE (NumPy integers taken as the int they
    hold)."""
    if max_group is None:
        return None
    from .config import FuseLimit, validate_model

    try:
        return validate_model(FuseLimit, {"fuse_max": plain(max_group)}, "tune").fuse_max
    except ConfigError as e:
        raise ConfigError(str(e).replace("tune.fuse_max", "run_grid max_group (a sweep file's "
                                         "tune.fuse_max)", 1)) from None


def run_grid(config, grid: dict[str, list], *, problem=None, fuse: bool = True,
             max_group: int | None = None) -> pd.DataFrame:
    """Run every configuration of `grid` (dotted keys -> value lists) over `config` (a dict
    or a YAML path, the schema of `fco_ray.run`); one DataFrame row per (configuration,
    evaluated round) with a column per grid key, `status` (finished / diverged), `round`
    and the metrics. Configurations that differ only in real-valued hyperparameters of one
    algorithm run fused (`fuse=False`: each alone; the same numbers), in groups of at most
    `max_group` (None: 64, or 1024 on a device backend). `problem`: a custom Problem instance
    every configuration runs on (as `fco_ray.run(config, problem=...)`)."""
    max_group = check_max_group(max_group)
    if isinstance(config, (str, Path)):
        config = load_yaml(config)
    if problem is not None and isinstance(config, dict):
        config = {**config, "problem": {"name": "custom"}}
    points = expand(config, grid)
    configs = [cfg for _, cfg in points]
    results = {}
    ray_configs = [c for c in configs if c.backend.uses_ray]
    # ray backend: one cluster for the whole grid, and groups on the same problem take over
    # the previous group's actors (fco_ray.backends.cluster.reuse)
    with reuse(ray_configs[0].backend.address) if ray_configs else contextlib.nullcontext():
        for prepared in prepare_groups(configs, problem=problem, fuse=fuse, max_group=max_group):
            for cfg, result in zip(prepared.configs, prepared.run()):
                results[id(cfg)] = result
    frames = []
    for point, cfg in points:
        result = results[id(cfg)]
        frame = pd.DataFrame.from_records(result.records)
        for k, v in reversed(point.items()):
            frame.insert(0, k, [v] * len(frame))
        frame.insert(len(point), "status", result.status)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
