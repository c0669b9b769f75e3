"""The Python API: `fco_ray.run(config) -> pandas.DataFrame` of per-round metrics
(`return_model=True`: also the final model, a dict of NumPy arrays)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .core.config import RunConfig, parse_run
from .core.plan import rows_callback, run_group
from .problems.base import Problem
from .runtime.files import load_yaml
from .tracking.progress import Progress


def resolve(config, problem: Problem | None = None) -> RunConfig:
    """A RunConfig from a RunConfig, a dict, or a path to a YAML file (with a custom
    `problem` instance, the file's problem section is replaced by `{name: custom}`)."""
    if isinstance(config, RunConfig):
        return config
    raw = load_yaml(config) if isinstance(config, (str, Path)) else config
    return parse_run({**raw, "problem": {"name": "custom"}} if problem is not None else raw)


def run(config, *, problem: Problem | None = None,
        on_eval: Callable[[dict], None] | None = None, return_model: bool = False,
        tracking: bool | str = False, progress: bool = False, **checkpoints):
    """Run one configuration and return one row per evaluated round.

    `config`: a dict, a YAML path or a RunConfig (schema: docs/configuration.md).
    `problem`: a custom Problem instance to use instead of building `config["problem"]`
    (then the config's problem section may be `{name: custom}` or omitted).
    `on_eval`: called with each metrics row as it is computed (e.g. to log it).
    `return_model`: return `(df, model)`, where `model` is the server's final output model
    (the one the last row's metrics are of) as `{block name: numpy array}` (e.g. `{"w", "b"}`
    for LASSO; saddle problems hold both players' blocks), or None for a diverged run (its
    iterates are not finite). Save it with `np.savez(path, **model)`.
    The run's final status ("finished" or "diverged") is in `df.attrs["status"]`; the backend
    settings it ran with (`device: auto` decided: fco_ray/backends/choice.py) in
    `df.attrs["backend"]`.
    `tracking`: log the run to MLflow exactly as `fco-ray run` does (True: the config's
    `tracking` section, default the SQLite store `mlflow.db` in the working directory; a
    string: that tracking URI); the run's id is in `df.attrs["mlflow_run_id"]`.
    `progress`: a progress line on stderr (round, rounds/s, ETA, train_loss) as rows come.
    `checkpoints`: `start`, `checkpoint_every`, `on_checkpoint` of `engine.run_rounds`.

    The model is not put in `df.attrs`: pandas deep-copies attrs on every selection, and
    `pd.concat` of frames whose attrs hold arrays raises.
    """
    return run_parsed(resolve(config, problem), problem=problem, on_eval=on_eval,
                      return_model=return_model, tracking=tracking, progress=progress, **checkpoints)


def run_parsed(cfg: RunConfig, *, problem: Problem | None = None,
               on_eval: Callable[[dict], None] | None = None, return_model: bool = False,
               tracking: bool | str = False, progress: bool = False, **checkpoints):
    """`run` of a configuration parsed already (`fco-ray run` parses its file and --set
    values into the RunConfig it hands here): every argument as in `run`."""
    log = _RunObservers(cfg, on_eval, tracking, progress)
    # the data is read and checked (run_group's prepare) before MLflow is touched (begin)
    prepared, (result,), models = run_group([cfg], log, problem, **checkpoints)
    import pandas as pd  # after the config is checked: a bad value is answered without it

    df = pd.DataFrame.from_records(result.records)
    df.attrs["status"] = result.status
    df.attrs["config"] = cfg.model_dump(mode="json")
    df.attrs["backend"] = prepared.backend.model_dump(mode="json")  # as run: `device: auto` decided
    if log.run is not None:
        df.attrs["mlflow_run_id"], df.attrs["mlflow_uri"] = log.run.run_id, log.run.store.uri
        df.attrs["mlflow_url"] = log.run.url()
    return (df, models.get(0)) if return_model else df


class _RunObservers:
    """The observers of one configuration's rows (`plan.run_group`'s log): its MLflow run
    (`tracking.RunLog`, where `tracking`), the progress line, `on_eval`; made once the run
    is prepared."""

    def __init__(self, cfg: RunConfig, on_eval, tracking: bool | str, progress: bool):
        self.cfg, self.on_eval, self.tracking, self.progress = cfg, on_eval, tracking, progress
        self.run = self.shown = None
        self.on_round = None  # no observer: the rounds go unwatched

    def begin(self, prepared) -> None:
        if self.tracking:
            from .tracking.runs import RunLog

            self.run = RunLog(self.cfg, self.tracking if isinstance(self.tracking, str) else None)
        self.shown = Progress(self.cfg.rounds, ["train_loss"]) if self.progress else None
        self.rows = [f for f in (self.run.add if self.run else None, self.shown, self.on_eval)
                     if f is not None]
        self.on_round = rows_callback(self._row) if self.rows else None

    def _row(self, row: dict) -> None:
        for f in self.rows:
            f(row)

    def fail(self) -> None:
        try:
            if self.run is not None:
                self.run.fail()
        finally:
            self._close_progress()

    def finish(self, prepared, results, models) -> None:
        self._close_progress()
        if self.run is not None:
            (result,) = results
            self.run.close(result.status, int(result.records[-1]["round"]) if result.records else 0,
                           models.get(0))

    def _close_progress(self) -> None:
        if self.shown is not None:
            self.shown.close()
