"""The Tune side of one trial: its resources, its name, and the trainable that runs it.

A trial's config is validated once, in the trial (`Sweep.run_config`), and handed to
`fco_ray.run` ready to use. The trainable reports every evaluated round with
`tune.report({...metrics, "round": r, "timesteps_total": r, "status": s})`; a diverged
trial ends with a last report whose metric is the worst value, so it ranks last.

Checkpoints: every `Sweep.checkpoint_every` rounds the report carries the run's state
(`tune.Checkpoint` of a directory with fco_ray.checkpoint's `state.npz`); a trial that Tune
reruns after its process failed (killed, node lost) gets it back from `tune.get_checkpoint`
and continues from that round with the numbers an uninterrupted run computes, after
reporting again the rows up to there (kept in the checkpoint: the driver may have died
before logging them; the MLflow logger skips rounds it already has). Algorithms
with state on the clients (CoCoA+ duals) do not checkpoint and rerun from round 0.
"""
from __future__ import annotations

import tempfile
from dataclasses import replace

import numpy as np
from ray import tune

from ..algorithms import ALGORITHMS
from ..api import run
from ..checkpoint import Snapshot, load_snapshot, save_snapshot
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
    stateless = not ALGORITHMS[cfg.algorithm.name].client_state
    every = sweep.checkpoint_every(cfg.rounds) if stateless else 0
    start = _restored() if stateless else None  # a rerun continues from its checkpoint
    last = {"round": start.round if start else 0}
    pending: list[Snapshot] = []  # the state of the round about to be reported
    reported = list(start.records) if start else []
    for metrics in reported:  # again: the logger may not have written them before the failure
        tune.report({**metrics, "replayed": True})  # (it skips rounds it has)

    def on_eval(row: dict) -> None:
        last["round"] = row["round"]
        status = "finished" if row["round"] == cfg.rounds else "running"
        metrics = {**row, "timesteps_total": row["round"], "status": status}
        reported.append(metrics)
        snapshot = pending.pop() if pending else None
        if snapshot is None or snapshot.round != row["round"]:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="fco-ckpt-") as folder:
            save_snapshot(folder, replace(snapshot, records=reported))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))  # copied

    def hold(snapshot: Snapshot) -> None:  # the engine calls this just before on_eval
        pending[:] = [snapshot]

    try:
        df = run(cfg, on_eval=on_eval, start=start, checkpoint_every=every, on_checkpoint=hold)
        diverged = df.attrs["status"] == "diverged"
    except np.linalg.LinAlgError:
        # an SVD of a non-finite client iterate (nuclear prox) fails before the engine
        # sees the non-finite values: that is divergence too
        diverged = True
    if diverged:
        tune.report(sweep.final_report({}, last["round"], "diverged"))


def _restored() -> Snapshot | None:
    """The state of this trial's last checkpoint, if Tune is rerunning it (None: round 0)."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        return load_snapshot(folder)


def trial_name(trial) -> str:
    """Readable trial names: algorithm, searched values, seed (e.g. fedmid_client_lr=0.001_seed0)."""
    point = trial.config.get("point", trial.config)
    point = {**point, **{k: v for k, v in trial.config.items() if k != "point"}}
    values = [f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
              for k, v in point.items() if k not in FIXED_POINT_KEYS]
    return "_".join([point["algorithm.name"], *values, f"seed{point['seed']}"])


def trial_dirname(trial) -> str:
    return trial.trial_id
