"""`fco_ray.run_grid(config, grid)`: a grid of configurations, run fused where possible.

Configurations that share the problem, the seed, the backend and every setting except
real-valued hyperparameters of a fusable algorithm (`Algorithm.fusable`) run as one fused
group (`fco_ray.fused`): one pass over the sampled rows serves the whole group. Others run
alone. Every configuration's rows equal its own `fco_ray.run`.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd

from .algorithms import ALGORITHMS
from .backends import make_backend
from .checks import check_clients
from .config import RunConfig, apply_overrides, load_yaml, parse_run
from .engine import run_rounds
from .errors import ConfigError
from .fused import fuse_key, run_fused
from .problems import build_problem

#: configurations per fused group at most: bounds the stacked state and client rows
#: (memory grows with the group size)
MAX_GROUP = 64


def expand(config: dict, grid: dict[str, list]) -> list[tuple[dict, RunConfig]]:
    """Every (grid point, validated run config) of the grid, in grid order."""
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"grid must be a non-empty mapping of dotted keys to value lists, got {grid!r}")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid[{key!r}] must be a non-empty list, got {values!r}")
    out = []
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values))
        raw = apply_overrides(config, [f"{k}={json.dumps(v)}" for k, v in point.items()])
        try:
            out.append((point, parse_run(raw)))
        except ConfigError as e:
            raise ConfigError(f"grid point ({', '.join(f'{k}={v}' for k, v in point.items())}): {e}") from None
    return out


def group_of(cfg: RunConfig) -> str:
    """Configurations with the same group run fused together (or alone if not fusable)."""
    shared = cfg.model_dump(mode="json", exclude={"algorithm", "tracking"})
    return json.dumps([shared, cfg.algorithm.name, fuse_key(cfg.algorithm)], sort_keys=True)


def groups(configs: list[RunConfig], max_group: int = MAX_GROUP) -> list[list[int]]:
    """Indices of `configs` in fused groups (of at most `max_group`), first-seen order."""
    by_key: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        fusable = ALGORITHMS[cfg.algorithm.name].fusable
        by_key.setdefault(group_of(cfg) if fusable else f"alone {i}", []).append(i)
    return [members[s:s + max_group] for members in by_key.values()
            for s in range(0, len(members), max_group)]


def run_grid(config, grid: dict[str, list], *, fuse: bool = True,
             max_group: int = MAX_GROUP) -> pd.DataFrame:
    """Run every configuration of `grid` (dotted keys -> value lists) over `config` (a dict
    or a YAML path, the schema of `fco_ray.run`); one DataFrame row per (configuration,
    evaluated round) with a column per grid key, `status` (finished / diverged), `round`
    and the metrics. `fuse=False` runs each configuration alone (same numbers)."""
    if isinstance(config, (str, Path)):
        config = load_yaml(config)
    points = expand(config, grid)
    configs = [cfg for _, cfg in points]
    plan = groups(configs, max_group) if fuse else [[i] for i in range(len(configs))]
    results: dict[int, object] = {}
    built: tuple[str, object] | None = None  # the problem of the last group, reused in order
    for members in plan:
        first = configs[members[0]]
        key = json.dumps([first.problem.model_dump(mode="json"), first.seed], sort_keys=True)
        if built is None or built[0] != key:
            built = None
            try:
                built = (key, build_problem(first.problem, first.seed))
            except ValueError as e:
                raise ConfigError(str(e)) from None
        problem = built[1]
        check_clients(first.algorithm.clients_per_round, problem.num_clients, problem.name)
        backend = make_backend(first.backend.model_dump(), problem)
        try:
            algorithms = [ALGORITHMS[configs[i].algorithm.name](configs[i].algorithm) for i in members]
            kwargs = {"rounds": first.rounds, "eval_every": first.eval_every, "seed": first.seed,
                      "divergence": first.divergence}
            if len(members) == 1:
                outcome = [run_rounds(problem, algorithms[0], backend, **kwargs)]
            else:
                outcome = run_fused(problem, algorithms, backend, **kwargs)
        finally:
            backend.close()
        results.update(zip(members, outcome))
    frames = []
    for i, (point, _) in enumerate(points):
        frame = pd.DataFrame.from_records(results[i].records)
        for k, v in reversed(point.items()):
            frame.insert(0, k, [v] * len(frame))
        frame.insert(len(point), "status", results[i].status)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
