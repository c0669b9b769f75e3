"""The Tune side of one trial: its resources, its name, and the trainable that runs it.

A trial's config is validated once, in the trial (`Sweep.run_config`), and handed to
`fco_ray.run` ready to use. The trainable reports every evaluated round with
`tune.report({...metrics, "round": r, "timesteps_total": r, "status": s})`; a diverged
trial ends with a last report whose metric is the worst value, so it ranks last.
"""
from __future__ import annotations

import numpy as np
from ray import tune

from ..api import run
from ..backends.ray_backend import STRATEGIES
from ..config import BackendConfig
from .schema import FIXED_POINT_KEYS, Sweep


def trial_bundles(backend: BackendConfig, cpus_per_trial: float = 1.0) -> list[dict]:
    """Placement-group bundles a trial reserves: bundle 0 for the trial process, then one
    per Ray client actor (which the ray backend places in bundles 1..n)."""
    bundles = [{"CPU": cpus_per_trial}]
    if backend.name == "ray":
        bundles += [{"CPU": backend.cpus_per_actor}] * backend.actors
    return bundles


class TrialResources:
    """Per-trial placement group, from the trial's own backend config (it may be searched)."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep

    def __call__(self, tune_config: dict):
        backend = self.sweep.run_config(self.sweep.point_of(tune_config)).backend
        strategy = STRATEGIES[backend.placement] if backend.name == "ray" else "PACK"
        return tune.PlacementGroupFactory(
            trial_bundles(backend, self.sweep.spec.tune.cpus_per_trial), strategy=strategy)


def train_trial(tune_config: dict, sweep: Sweep, finished: dict) -> None:
    """The Tune trainable: one `fco_ray.run`, reporting every evaluated round.

    `finished`: trials already FINISHED in MLflow before an interruption (by trial id): a
    resumed sweep reports their final result instead of running them again."""
    done = finished.get(tune.get_context().get_trial_id())
    if done is not None:
        tune.report(sweep.final_report(done["metrics"], done["round"], done["status"]))
        return
    cfg = sweep.run_config(sweep.point_of(tune_config))
    last = {"round": 0}

    def on_eval(row: dict) -> None:
        last["round"] = row["round"]
        status = "finished" if row["round"] == cfg.rounds else "running"
        tune.report({**row, "timesteps_total": row["round"], "status": status})

    try:
        diverged = run(cfg, on_eval=on_eval).attrs["status"] == "diverged"
    except np.linalg.LinAlgError:
        # an SVD of a non-finite client iterate (nuclear prox) fails before the engine
        # sees the non-finite values: that is divergence too
        diverged = True
    if diverged:
        tune.report(sweep.final_report({}, last["round"], "diverged"))


def trial_name(trial) -> str:
    """Readable trial names: algorithm, searched values, seed (e.g. fedmid_client_lr=0.001_seed0)."""
    point = trial.config.get("point", trial.config)
    point = {**point, **{k: v for k, v in trial.config.items() if k != "point"}}
    values = [f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
              for k, v in point.items() if k not in FIXED_POINT_KEYS]
    return "_".join([point["algorithm.name"], *values, f"seed{point['seed']}"])


def trial_dirname(trial) -> str:
    return trial.trial_id
