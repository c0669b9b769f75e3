"""MLflow logging of a sweep from the Tune driver: one child run per trial under the
sweep's parent run (SQLite is then written by this one process only), with the trial's
artifacts (model.npz, attack.png) from its final checkpoint; progress in the terminal:
one line per ended trial and, every `PROGRESS_SECONDS`, one per running trial (round,
rounds/s, ETA, the tuning metric).

The callback is rebuilt from plain data whenever Tune pickles and restores it (Tune keeps
its RunConfig, callbacks included, with the experiment state), so a sweep resumed with
`Tuner.restore` logs through a live callback of its own without reaching into Tune.
"""
from __future__ import annotations

import json

import time
from functools import partial
from pathlib import Path
from typing import Callable

from ray import tune

from ..core.checkpoint import FILE as STATE_FILE
from ..tracking.progress import RateMeter, progress_text
from ..tracking.store import Store, TrackingUnavailable
from ..tracking.summary import run_label
from ..tracking.sweeps import SweepLog
from .schema import FIXED_POINT_KEYS
from .sweep import Sweep
from .trainable import member_key

PROGRESS_SECONDS = 10.0  # how often running trials are shown (a fast trial ends before)


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
        self.running: dict[str, dict] = {}  # trial id -> label, first seen (time, round), last row
        self.shown = time.monotonic()

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
        points = self.sweep.members_of(trial.config)
        keys = [member_key(trial.trial_id, j) for j in range(len(points))]
        configs = [self.sweep.run_config(p) for p in points]  # parsed once per point
        params = [c.model_dump(mode="json") for c in configs]  # what MLflow records
        labels = [run_label(c, [k for k in p if k not in FIXED_POINT_KEYS])
                  for c, p in zip(params, points)]
        open_keys = [k for k in keys if k not in self.skipped]
        first = configs[0]
        self.running[trial.trial_id] = {
            "keys": keys, "labels": labels, "open": set(open_keys), "last": {},
            # a fused group is one Tune trial running len(points) configurations at once
            "label": (f"{first.algorithm.name} seed{first.seed}, {len(points)} fused configurations"
                      if len(points) > 1 else labels[0]),
            "rounds": first.rounds, "meter": RateMeter(), "row": None}
        for key, config, label in zip(keys, params, labels):
            if key in open_keys:
                self._write(self.log.start, key, config, label)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        state = self.running.get(trial.trial_id)
        if state is None or result.get("status") not in ("running", "finished"):
            return
        rows, ended = result_rows(result)
        for j, row in rows.items():
            state["last"][j] = row
        self._write(self.log.add_rows, {state["keys"][j]: row for j, row in rows.items()
                                        if state["keys"][j] in state["open"]})
        for j in ended:
            self._close(trial, j, "diverged")
        if rows:
            row = {**next(iter(rows.values())),
                   **{k: result[k] for k in (self.sweep.metric,) if k in result}}
            if len(state["keys"]) > 1:  # a fused group: show its best member so far
                values = [r[self.sweep.metric] for r in rows.values() if isinstance(r.get(self.sweep.metric), (int, float))]
                row.pop(self.sweep.metric, None)
                if values:
                    row[f"best {self.sweep.metric}"] = max(values) if self.sweep.mode == "max" else min(values)
            self._progress(trial.trial_id, row)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        # the final report of a finished trial: its artifacts (trainable.train_trial)
        state = self.running.get(trial.trial_id)
        if state is None:
            return
        with checkpoint.as_directory() as folder:
            if (Path(folder) / STATE_FILE).is_file():
                return  # a state checkpoint for reruns (fco_ray.core.checkpoint), no artifacts
            for j, key in enumerate(state["keys"]):
                where = Path(folder) / str(j)
                if key in state["open"] and where.is_dir():
                    self._write(self.log.log_artifacts, key, str(where))

    def _progress(self, trial_id: str, row: dict) -> None:
        """Every PROGRESS_SECONDS, one line per running trial: where it is and how fast."""
        state = self.running.get(trial_id)
        if state is None:
            return
        now = time.monotonic()
        state["meter"].add(now, row["round"])  # a rerun's round 0 starts it over
        state["row"] = row
        if now - self.shown < PROGRESS_SECONDS:
            return
        self.shown = now
        for s in self.running.values():
            # a trial that has not moved since its last line (waiting for a CPU, compiling) is
            # not shown again: the same line twice says nothing new
            if s["row"] is not None and s["row"]["round"] < s["rounds"]:
                metric = {k: s["row"][k] for k in (self.sweep.metric, f"best {self.sweep.metric}") if k in s["row"]}
                text = "  " + progress_text(s["label"], s["row"]["round"], s["rounds"], s["meter"].rate(), metric)
                if text != s.get("said"):
                    s["said"] = text
                    self.echo(text)

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result or {}
        status = result.get("status", "stopped")
        status = "stopped" if status == "running" else status  # stopped early by the scheduler
        for j in range(len(self.running.get(trial.trial_id, {}).get("keys", []))):
            self._close(trial, j, status)
        self.running.pop(trial.trial_id, None)

    def on_trial_recover(self, iteration, trials, trial, **info):
        # the trial process failed and Tune reruns it from its last checkpoint (or round 0;
        # same rows): keep its rows so far; the rerun's rows up to there are not logged twice
        for key in sorted(self.running.get(trial.trial_id, {}).get("open", ())):
            self._write(self.log.retry, key)
        self.echo(f"{trial}: failed, rerun by Tune ({trial.num_failures} of at most "
                  f"{self.sweep.spec.tune.max_failures}; details: "
                  f"{Path(trial.local_path or '.') / 'error.txt'})")

    def on_trial_error(self, iteration, trials, trial, **info):
        where = Path(trial.local_path or ".") / "error.txt"
        for j in range(len(self.running.get(trial.trial_id, {}).get("keys", []))):
            self._close(trial, j, "error", f"error (details: {where})")
        self.running.pop(trial.trial_id, None)

    def _close(self, trial, j: int, status: str, text: str | None = None) -> None:
        """End configuration j of a trial (once) and print its line."""
        state = self.running.get(trial.trial_id)
        if state is None or state["keys"][j] not in state["open"]:
            return
        state["open"].discard(state["keys"][j])
        self._write(self.log.end, state["keys"][j], status)
        self.completed += 1
        if text is None:
            row = state["last"].get(j, {})
            value = row.get(self.sweep.metric, float("nan")) if status != "diverged" else float("nan")
            text = f"{status} at round {row.get('round', 0)}, {self.sweep.metric}={value:.4g}"
        self.echo(f"[{self.completed}/{self.sweep.num_trials()}] {state['labels'][j]}: {text}")


def result_rows(result: dict) -> tuple[dict[int, dict], list[int]]:
    """A trial's Tune result as (rows by member index, members that ended diverged): `members`
    is [[index, row], ...] (fco_ray/sweep/trainable.py); a result checkpointed by an earlier
    version and replayed on resume holds them as JSON text ({index: row}, [index, ...])."""
    members, ended = result["members"], result["ended"]
    if isinstance(members, str):
        members, ended = json.loads(members).items(), json.loads(ended)
    return {int(j): row for j, row in members}, [int(j) for j in ended]
