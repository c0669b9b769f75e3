"""MLflow logging of a sweep from the Tune driver: one child run per trial under the
sweep's parent run (SQLite is then written by this one process only), plus one progress
line per ended trial.

The callback is rebuilt from plain data whenever Tune pickles and restores it (Tune keeps
its RunConfig, callbacks included, with the experiment state), so a sweep resumed with
`Tuner.restore` logs through a live callback of its own without reaching into Tune.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

from ray import tune
from ray.tune.result import AUTO_RESULT_KEYS

from ..tracking import Store, SweepLog, TrackingUnavailable
from .schema import Sweep


def metrics_row(result: dict) -> dict:
    """The engine's metrics row inside a Tune result (without Tune's bookkeeping)."""
    skip = set(AUTO_RESULT_KEYS) | {"status", "replayed"}  # replayed: a restored trial's rows
    return {k: v for k, v in result.items() if k not in skip}


class MLflowLogger(tune.Callback):
    """Driver-side hooks writing the sweep's child runs.

    The MLflow side (`SweepLog`) is opened in `setup`, attached to the sweep's parent run
    (created by `run_sweep` before Tune starts). If an MLflow write fails (the store went
    away), nothing more is written and the sweep stops at the end of Tune's step
    (`on_step_end` raises; Tune propagates exceptions from there, not from the trial
    callbacks): trials stay as they are, so `--resume` reruns the unfinished ones and logs
    what is missing."""

    def __init__(self, sweep: Sweep, tracking_uri: str,
                 echo: Callable[[str], None] = partial(print, flush=True)):
        self.sweep, self.tracking_uri, self.echo = sweep, tracking_uri, echo
        self.log: SweepLog | None = None
        self.store_error: Exception | None = None
        self.skipped: set[str] = set()
        self.completed = 0

    def __reduce__(self):
        # pickled by Tune with the experiment: only the plain data, never the live store
        return (MLflowLogger, (self.sweep, self.tracking_uri))

    def setup(self, **info):
        self.log = SweepLog(Store(self.tracking_uri), self.sweep.experiment, self.sweep.name,
                            self.sweep.metric, self.sweep.mode, self.sweep.source, resume=True)
        self.skipped = set(self.log.finished())
        self.completed = len(self.skipped)

    def _write(self, write: Callable, *args) -> None:
        if self.store_error is None:
            try:
                write(*args)
            except Exception as e:  # noqa: BLE001 - whatever the store raised stops the sweep
                self.store_error = e

    def on_step_end(self, iteration, trials, **info):
        if self.store_error is not None:
            raise TrackingUnavailable(f"the MLflow store {self.log.store.uri} failed: "
                                      f"{type(self.store_error).__name__}: {self.store_error}")

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id not in self.skipped:
            point = self.sweep.point_of(trial.config)
            config = self.sweep.run_config(point).model_dump(mode="json")
            self._write(self.log.start, trial.trial_id, config, str(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("status") in ("running", "finished"):
            self._write(self.log.add_row, trial.trial_id, metrics_row(result))

    def on_trial_complete(self, iteration, trials, trial, **info):
        if trial.trial_id in self.skipped:
            return
        result = trial.last_result or {}
        status = result.get("status", "stopped")
        status = "stopped" if status == "running" else status  # stopped early by the scheduler
        self._write(self.log.end, trial.trial_id, status)
        value = result.get(self.sweep.metric, float("nan"))
        self._line(trial, f"{status} at round {result.get('round', 0)}, {self.sweep.metric}={value:.4g}")

    def on_trial_recover(self, iteration, trials, trial, **info):
        # the trial process failed and Tune reruns it from scratch (same seed, same rows):
        # keep its rows so far; the rerun's rows up to there are not logged twice
        self._write(self.log.retry, trial.trial_id)
        self.echo(f"{trial}: failed, rerun by Tune ({trial.num_failures} of at most "
                  f"{self.sweep.spec.tune.max_failures}; details: "
                  f"{Path(trial.local_path or '.') / 'error.txt'})")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._write(self.log.end, trial.trial_id, "error")
        self._line(trial, f"error (details: {Path(trial.local_path or '.') / 'error.txt'})")

    def _line(self, trial, text: str) -> None:
        self.completed += 1
        self.echo(f"[{self.completed}/{self.sweep.num_trials()}] {trial}: {text}")


def tune_loggers() -> list:
    """Tune's own per-trial result files: `result.json` and `progress.csv` in each trial's
    directory, as Tune writes by default, but not its TensorBoard event files (MLflow is
    this platform's store). Tune adds all three unless TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1,
    which `run_sweep` sets around `fit`: the TensorBoard writer adds driver work to every
    reported round and its files duplicate what MLflow holds (benchmarks/README.md)."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback()]
