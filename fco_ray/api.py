"""The Python API: `fco_ray.run(config) -> pandas.DataFrame` of per-round metrics
(`return_model=True`: also the final model, a dict of NumPy arrays)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .core.config import RunConfig, parse_run
from .core.plan import prepare, rows_callback
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
    prepared = prepare([cfg], problem)  # the data is read and checked before MLflow is touched
    log = None
    if tracking:
        from .tracking.runs import RunLog

        log = RunLog(cfg, tracking if isinstance(tracking, str) else None)
    shown = Progress(cfg.rounds, ["train_loss"]) if progress else None
    rows = [f for f in (log.add if log else None, shown, on_eval) if f is not None]
    try:
        (result,) = prepared.run(rows_callback(lambda row: [f(row) for f in rows]) if rows else None,
                                 **checkpoints)
    except BaseException:
        if log is not None:
            log.fail()
        raise
    finally:
        if shown is not None:
            shown.close()
    model = prepared.model(0, result)
    import pandas as pd  # after the config is checked: a bad value is answered without it

    df = pd.DataFrame.from_records(result.records)
    df.attrs["status"] = result.status
    df.attrs["config"] = cfg.model_dump(mode="json")
    df.attrs["backend"] = prepared.backend.model_dump(mode="json")  # as run: `device: auto` decided
    if log is not None:
        log.close(result.status, int(df["round"].iloc[-1]) if len(df) else 0, model)
        df.attrs["mlflow_run_id"], df.attrs["mlflow_uri"] = log.run_id, log.store.uri
        df.attrs["mlflow_url"] = log.url()
    return (df, model) if return_model else df
