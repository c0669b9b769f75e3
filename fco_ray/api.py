"""The Python API: `fco_ray.run(config) -> pandas.DataFrame` of per-round metrics
(`return_model=True`: also the final model, a dict of NumPy arrays)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .algorithms import ALGORITHMS
from .backends import make_backend
from .checks import check_clients, check_fits
from .config import ConfigError, RunConfig, load_yaml, parse_run
from .engine import run_rounds
from .problems import build_problem
from .problems.base import Problem


def resolve(config) -> RunConfig:
    """A RunConfig from a RunConfig, a dict, or a path to a YAML file."""
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, (str, Path)):
        config = load_yaml(config)
    return parse_run(config)


def make_problem(cfg: RunConfig) -> Problem:
    try:
        return build_problem(cfg.problem, cfg.seed)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def run(config, *, problem: Problem | None = None,
        on_eval: Callable[[dict], None] | None = None, return_model: bool = False,
        **checkpoints):
    """Run one configuration and return one row per evaluated round.

    `config`: a dict, a YAML path or a RunConfig (schema: docs/configuration.md).
    `problem`: a custom Problem instance to use instead of building `config["problem"]`
    (then the config's problem section may be `{name: custom}` or omitted).
    `on_eval`: called with each metrics row as it is computed (e.g. to log it).
    `return_model`: return `(df, model)`, where `model` is the server's final output model
    (the one the last row's metrics are of) as `{block name: numpy array}` (e.g. `{"w", "b"}`
    for LASSO; saddle problems hold both players' blocks), or None for a diverged run (its
    iterates are not finite). Save it with `np.savez(path, **model)`.
    The run's final status ("finished" or "diverged") is in `df.attrs["status"]`.
    `checkpoints`: `start`, `checkpoint_every`, `on_checkpoint` of `engine.run_rounds`.

    The model is not put in `df.attrs`: pandas deep-copies attrs on every selection, and
    `pd.concat` of frames whose attrs hold arrays raises.
    """
    if isinstance(config, (str, Path)):
        config = load_yaml(config)
    if problem is not None and isinstance(config, dict):
        config = {**config, "problem": {"name": "custom"}}
    cfg = resolve(config)
    if problem is not None:  # a custom instance: its own kinds decide what fits
        check_fits(cfg.algorithm.name, problem.kinds, problem.name)
    else:
        problem = make_problem(cfg)
    check_clients(cfg.algorithm.clients_per_round, problem.num_clients, problem.name)
    algorithm = ALGORITHMS[cfg.algorithm.name](cfg.algorithm)
    backend = make_backend(cfg.backend.model_dump(), problem)
    try:
        result = run_rounds(problem, algorithm, backend, rounds=cfg.rounds,
                            eval_every=cfg.eval_every, seed=cfg.seed, on_eval=on_eval,
                            divergence=cfg.divergence, **checkpoints)
    finally:
        backend.close()
    df = pd.DataFrame.from_records(result.records)
    df.attrs["status"] = result.status
    df.attrs["config"] = cfg.model_dump(mode="json")
    if not return_model:
        return df
    model = None
    if result.status == "finished":
        model = {k: np.array(v, copy=True) for k, v in algorithm.output(problem, result.state).items()}
    return df, model
