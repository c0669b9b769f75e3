"""`fco_ray.run_grid(config, grid)`: a grid of configurations, run fused where possible.

Configurations that share the problem, the seed, the backend and every setting except
real-valued hyperparameters of a fusable algorithm (`Algorithm.fusable`) and, where the
problem allows it, the regularizer weight `problem.lam` (`fused.fusable`) run as one fused
group (`fco_ray.group`): one pass over the sampled rows serves the whole group. Others run
alone. Every configuration's rows equal its own `fco_ray.run`.
"""
from __future__ import annotations

import contextlib
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from .algorithms import ALGORITHMS
from .backends import make_backend
from .checks import check_clients
from .cluster import reuse
from .config import RunConfig, apply_overrides, load_yaml, parse_run
from .engine import run_rounds
from .errors import ConfigError
from .group import fusable, fuse_key, make_group
from .problems import PROBLEMS, build_problem

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
    if _lam_fuses(cfg):
        del shared["problem"]["lam"]
    return json.dumps([shared, cfg.algorithm.name, fuse_key(cfg.algorithm)], sort_keys=True)


def _lam_fuses(cfg: RunConfig) -> bool:
    return fusable(ALGORITHMS[cfg.algorithm.name], PROBLEMS[cfg.problem.name].params, "problem.lam")


def groups(configs: list[RunConfig], max_group: int = MAX_GROUP) -> list[list[int]]:
    """Indices of `configs` in fused groups (of at most `max_group`), first-seen order."""
    by_key: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        fusable = ALGORITHMS[cfg.algorithm.name].fusable
        by_key.setdefault(group_of(cfg) if fusable else f"alone {i}", []).append(i)
    return [members[s:s + max_group] for members in by_key.values()
            for s in range(0, len(members), max_group)]


def run_group(configs: list[RunConfig], on_round=None, **checkpoints) -> list[tuple[object, dict | None]]:
    """Run configurations that `groups` put together as one group (`fco_ray.group`): per
    configuration its RunResult and final model (None if it diverged). `on_round(round,
    rows, diverged)` and `checkpoints` (`start`, `checkpoint_every`, `on_checkpoint`): see
    `engine.run_rounds`."""
    first = configs[0]
    try:
        problem = build_problem(first.problem, first.seed)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_clients(first.algorithm.clients_per_round, problem.num_clients, problem.name)
    algorithms = [ALGORITHMS[c.algorithm.name](c.algorithm) for c in configs]
    lams = [c.problem.lam for c in configs] if _lam_fuses(first) else []
    group = make_group(algorithms, lams if len(set(lams)) > 1 else None)
    backend = make_backend(first.backend.model_dump(), problem)
    try:
        results = run_rounds(problem, group, backend, rounds=first.rounds, eval_every=first.eval_every,
                             seed=first.seed, divergence=first.divergence, on_round=on_round,
                             **checkpoints)
    finally:
        backend.close()
    return [(r, _model(problem, a, r)) for a, r in zip(algorithms, results)]


def _model(problem, algorithm, result) -> dict | None:
    """A finished run's final output model as plain arrays."""
    if result.status != "finished" or result.state is None:
        return None
    return {k: np.asarray(v) for k, v in algorithm.output(problem, result.state).items()}


def run_grid(config, grid: dict[str, list], *, fuse: bool = True,
             max_group: int = MAX_GROUP) -> pd.DataFrame:
    """Run every configuration of `grid` (dotted keys -> value lists) over `config` (a dict
    or a YAML path, the schema of `fco_ray.run`); one DataFrame row per (configuration,
    evaluated round) with a column per grid key, `status` (finished / diverged), `round`
    and the metrics. Configurations that differ only in real-valued hyperparameters of one
    algorithm run fused (`fuse=False`: each alone; the same numbers)."""
    if isinstance(config, (str, Path)):
        config = load_yaml(config)
    points = expand(config, grid)
    configs = [cfg for _, cfg in points]
    plan = groups(configs, max_group) if fuse else [[i] for i in range(len(configs))]
    results = {}
    ray_configs = [c for c in configs if c.backend.name == "ray"]
    # ray backend: one cluster for the whole grid, and groups on the same problem take over
    # the previous group's actors (fco_ray.cluster.reuse)
    with reuse(ray_configs[0].backend.address) if ray_configs else contextlib.nullcontext():
        for members in plan:
            outcome = run_group([configs[i] for i in members])
            results.update(zip(members, (r for r, _ in outcome)))
    frames = []
    for i, (point, _) in enumerate(points):
        frame = pd.DataFrame.from_records(results[i].records)
        for k, v in reversed(point.items()):
            frame.insert(0, k, [v] * len(frame))
        frame.insert(len(point), "status", results[i].status)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
