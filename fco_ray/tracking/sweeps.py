"""A sweep's MLflow log, written from the Tune driver: one parent run, one child run per
configuration."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from .queries import best_per_algorithm, children, find_parent, run_ranks, trials_frame
from .runs import close_run
from .store import (
    ALGORITHM,
    FINAL_ROUND,
    PARENT,
    RANK,
    RETRIES,
    ROLE,
    STATUS,
    SWEEP,
    TRIAL_ID,
    Store,
    param_value,
)
from .summary import Summary


class SweepLog:
    """The MLflow side of one sweep: its parent run and one child run per Tune trial id.

    Child runs are keyed by trial id, so a resumed sweep reuses them: a trial whose run is
    FINISHED is not logged again, and a trial that is rerun from scratch continues its run
    after the last round already logged (same seed, same rows), never making a second run.
    Writes are few because a store's cost is per write (an SQLite transaction, a REST call),
    not per value: a child run is created with its tags; its params and metric rows are
    buffered and go in one batch every `FLUSH_ROWS` rows or `FLUSH_SECONDS`, and the last
    batch goes with its end (status, summary metrics): ~3 writes for a short trial.
    """

    FLUSH_ROWS, FLUSH_SECONDS = 20, 5.0
    FLUSHES_PER_RESULT = 4  # runs written per Tune result at most (the others wait their turn)

    def __init__(self, store: Store, experiment: str, name: str, metric: str, mode: str,
                 sweep_text: str, resume: bool):
        self.store, self.name, self.metric, self.mode = store, name, metric, mode
        self.experiment_id = store.experiment_id(experiment)
        parent = find_parent(store, self.experiment_id, name) if resume else None
        if parent is None:
            parent = store.client.create_run(self.experiment_id, run_name=name, tags={
                ROLE: "sweep", SWEEP: name, "fco.metric": metric, "fco.mode": mode})
            store.client.log_text(parent.info.run_id, sweep_text, "sweep.yaml")
            self.runs = {}
        else:
            store.client.update_run(parent.info.run_id, status="RUNNING")
            self.runs = {r.data.tags[TRIAL_ID]: r for r in children(store, parent)}
        self.parent_id = parent.info.run_id
        self._open: dict[str, dict] = {}  # trial id -> {run_id, last_step, rows, times, flushed}
        self._closed: dict[str, str] = {}  # trial id -> run id, of runs ended by this sweep

    def finished(self) -> dict[str, dict]:
        """Trial id -> (status, final round, final metrics) of trials whose run is FINISHED."""
        return {tid: {"status": r.data.tags.get(STATUS), "metrics": dict(r.data.metrics),
                      "round": param_value(r.data.tags.get(FINAL_ROUND, "0"))}
                for tid, r in self.runs.items() if r.info.status == "FINISHED"}

    def start(self, trial_id: str, config: dict, run_name: str) -> None:
        """Open (or reopen) the trial's child run; a FINISHED run stays closed, and an open
        one (a trial rerun by Tune after a failure, see `retry`) stays as it is."""
        if trial_id in self._open or trial_id in self._closed:
            return
        run = self.runs.get(trial_id)
        if run is not None and run.info.status == "FINISHED":
            return
        if run is None:
            run = self.store.client.create_run(self.experiment_id, run_name=run_name, tags={
                PARENT: self.parent_id, ROLE: "trial", SWEEP: self.name, TRIAL_ID: trial_id,
                ALGORITHM: config["algorithm"]["name"], STATUS: "running"})
            self.runs[trial_id] = run
            last = -1
        else:  # interrupted or errored before: rerun from scratch, continue the same run
            self.store.client.update_run(run.info.run_id, status="RUNNING")
            self.store.set_tags(run.info.run_id, {STATUS: "running"})
            last = self.store.last_step(run.info.run_id, self.metric)
        # the params go with the first batch (again after a restart: the same values)
        self._open[trial_id] = {"run_id": run.info.run_id, "last_step": last, "rows": [],
                                "times": [], "flushed": time.monotonic(),
                                "params": {k: v for k, v in config.items() if k != "tracking"},
                                "summary": Summary(self.metric, self.mode)}

    def add_rows(self, rows: dict[str, dict]) -> None:
        """One Tune result's rows (trial id -> row: a fused group's configurations). Runs whose
        buffer is due (`FLUSH_ROWS`, `FLUSH_SECONDS`) are written, at most
        `FLUSHES_PER_RESULT` of them, the longest waiting first: a fused group's runs all
        start together and would otherwise all be due on the same result, whose processing
        then holds Tune's driver loop (one SQLite transaction each)."""
        due = []
        for trial_id, row in rows.items():
            trial = self._open.get(trial_id)
            if trial is None:
                continue  # a closed run
            if row["round"] == 0:  # a (re)run starts over: same seed, same rows, summarized again
                trial["summary"] = Summary(self.metric, self.mode)
            trial["summary"].add(row)
            if row["round"] <= trial["last_step"]:
                continue  # a round logged before an interruption
            trial["rows"].append(row)
            trial["times"].append(int(time.time() * 1000))
            trial["last_step"] = row["round"]
            if (len(trial["rows"]) >= self.FLUSH_ROWS
                    or time.monotonic() - trial["flushed"] > self.FLUSH_SECONDS):
                due.append(trial)
        for trial in sorted(due, key=lambda t: t["flushed"])[:self.FLUSHES_PER_RESULT]:
            self._flush(trial)

    def add_row(self, trial_id: str, row: dict) -> None:
        self.add_rows({trial_id: row})

    def retry(self, trial_id: str) -> None:
        """The trial failed and is rerun from round 0: write the rows it logged so far and
        count the attempt (tag `fco.retries`); its rerun continues after the last row."""
        trial = self._open.get(trial_id)
        if trial is None:
            return
        self._flush(trial)
        trial["retries"] = trial.get("retries", 0) + 1
        self.store.set_tags(trial["run_id"], {RETRIES: trial["retries"]})

    def _flush(self, trial: dict) -> None:
        if trial["rows"] or trial["params"]:  # kept for the next try if the write fails
            self.store.log_rows(trial["run_id"], trial["rows"], trial["times"], params=trial["params"])
        trial["rows"], trial["times"], trial["params"] = [], [], None
        trial["flushed"] = time.monotonic()

    def end(self, trial_id: str, status: str) -> None:
        """Close the trial's run: status finished | diverged | stopped | error."""
        trial = self._open.get(trial_id)
        if trial is None:
            return
        close_run(self.store, trial["run_id"], status, max(trial["last_step"], 0), trial["summary"],
                  trial["rows"], trial["times"], trial["params"])
        del self._open[trial_id]
        self._closed[trial_id] = trial["run_id"]

    def log_artifacts(self, trial_id: str, folder: str | Path) -> None:
        """Attach the files in `folder` (e.g. `model.npz`) to the trial's run, open or ended."""
        run = self._open.get(trial_id, {}).get("run_id") or self._closed.get(trial_id) or (
            self.runs[trial_id].info.run_id if trial_id in self.runs else None)
        if run is not None:
            self.store.client.log_artifacts(run, str(folder))

    def interrupted(self) -> None:
        """End the parent run and its running child runs KILLED (the sweep stopped before
        its trials did: Ctrl-C, SIGTERM, a full disk); `--resume` sets them RUNNING again
        and continues each child run after its last logged round."""
        parent = self.store.client.get_run(self.parent_id)
        for run in children(self.store, parent):
            if run.info.status == "RUNNING":
                self.store.client.set_terminated(run.info.run_id, "KILLED")
        self.store.client.set_terminated(self.parent_id, "KILLED")

    def finish(self, failed: bool) -> pd.DataFrame:
        """Write each child run's place in the sweep's ranking (tag `fco.rank`: the order of
        the MLflow link's run list, the verdict's order) and the best configuration per
        algorithm on the parent run, and close it."""
        parent = self.store.client.get_run(self.parent_id)
        trials = trials_frame(children(self.store, parent))
        for run_id, rank in run_ranks(trials, self.metric, self.mode).items():
            self.store.set_tags(run_id, {RANK: rank})
        best = best_per_algorithm(trials, self.metric, self.mode)
        for row in best.to_dict("records"):
            alg = row["algorithm"]
            config = {**{k: row[k] for k in best.attrs["params"]}, "seeds": row["seeds"]}
            self.store.set_tags(self.parent_id, {f"fco.best.{alg}": json.dumps(config),
                                                 f"fco.best.{alg}.run_ids": json.dumps(row["run_ids"])})
            self.store.log_rows(self.parent_id, [
                {"round": 0, **{f"best.{alg}.{m}": row[m] for m in best.attrs["metrics"]}}])
        self.store.client.set_terminated(self.parent_id, "FAILED" if failed else "FINISHED")
        return best
