"""Tune's per-trial result files, written where Tune reads them back.

Each trial's folder under the sweep's storage (`<storage>/<name>/<trial>/`) holds
`result.json` (one JSON object per reported round), `progress.csv` (the same rows, nested keys
joined by "/") and `params.json` (the trial's configuration), as Tune's default loggers write
them. Those loggers write into a staging folder on the driver that Tune copies to storage
from time to time; a sweep stopped between a trial's first rows and the next copy left the
trial without files in storage, and Tune's analysis at the end of the run and of the next
`--resume` warned "Failed to fetch metrics for N trial(s): ... FileNotFoundError" (the
rows themselves live in MLflow and were right). `TrialFiles` writes into the storage folder
directly (fco-ray's storage is always a local folder), appending and closing at every row
(`runtime.files.append_file`: never through a link): no state to lose, nothing to copy. Tune's analysis also reads the files of a trial that has
not reported yet (its last result is `{}`, not None), and warned the same way for the trials
still pending when a sweep was stopped; every trial gets an empty `result.json` when the
driver first sees it (an empty file reads as no rows).

Tune's TensorBoard writer is not used: it adds driver work at every reported round and its
files duplicate what MLflow holds (`run_sweep` sets TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1).
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ray.tune.logger import LoggerCallback
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import SafeFallbackEncoder

from ..runtime.files import append_file, write_file

RESULT, PROGRESS, PARAMS = "result.json", "progress.csv", "params.json"


def _folder(trial) -> Path:
    folder = Path(trial.path)  # the trial's folder in storage (`trial.storage.trial_fs_path`)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class TrialFiles(LoggerCallback):
    """result.json, progress.csv and params.json of every trial, in its storage folder."""

    def __init__(self):
        super().__init__()
        self.seen: set[str] = set()  # the trials whose result.json exists
        self.headers: dict[str, list[str]] = {}  # each trial's progress.csv columns, once read

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        for trial in trials:
            if trial.trial_id in self.seen:
                continue
            try:
                folder = _folder(trial)
            except RuntimeError:  # no folder name yet: at a later step
                continue
            append_file(folder / RESULT, "")
            self.seen.add(trial.trial_id)

    def log_trial_start(self, trial) -> None:
        write_file(_folder(trial) / PARAMS, json.dumps(trial.config, indent=2, sort_keys=True,
                                                       cls=SafeFallbackEncoder))

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        folder = _folder(trial)
        append_file(folder / RESULT, json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        row = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        path = folder / PROGRESS
        header = self.headers.get(trial.trial_id)
        if header is None and path.exists() and path.stat().st_size:  # a resumed trial's file
            with open(path, newline="") as f:
                header = next(csv.reader(f), None)
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=header or list(row), extrasaction="ignore")
        if header is None:
            writer.writeheader()
        self.headers[trial.trial_id] = list(writer.fieldnames)
        writer.writerow(row)
        append_file(path, text.getvalue())
