"""One configuration's MLflow run: created, its rows logged as they come, closed with its
status, summaries and artifacts (`RunLog`: `fco-ray run` and `fco_ray.run(tracking=...)`)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from .links import run_url, ui_base
from .store import ALGORITHM, FINAL_ROUND, ROLE, STATUS, Store, check_store, default_uri
from .summary import Summary, run_label
from ..runtime.files import replacing


def write_artifacts(cfg, model: dict, folder: Path) -> list[Path]:
    """Write a finished run's artifacts to `folder` and return their paths: `model.npz` (the
    final model's blocks, `np.savez`: arrays only, read back with
    `np.load(path, allow_pickle=False)`), then the problem's `pictures` of it (E6:
    `attack.png`)."""
    import numpy as np

    written = [Path(folder) / "model.npz"]
    with replacing(written[0]) as temp:
        np.savez(temp, **model)
    return written + cfg.problem.problem_class.pictures(model, folder)


def start_single_run(store: Store, config: dict, run_name: str) -> str:
    """An MLflow run for one `fco-ray run` (no Tune); `config` is the validated run config."""
    exp = store.experiment_id(config["tracking"]["experiment"])
    run = store.client.create_run(exp, run_name=run_name, tags={
        ROLE: "run", ALGORITHM: config["algorithm"]["name"], STATUS: "running"})
    store.log_config(run.info.run_id, {k: v for k, v in config.items() if k != "tracking"})
    return run.info.run_id


def close_run(store: Store, run_id: str, status: str, final_round: int,
              summary: Summary | None = None, rows: Iterable[dict] = (),
              times: Iterable[int] | None = None, params: dict | None = None) -> None:
    """End a run with its fco.status (finished, diverged, stopped, error), final round and
    summary metrics (`final.*`, `best.*`, logged at step = the final round); metric `rows`
    and `params` not yet written go in the same write (one `log_batch`, then the end)."""
    rows, now = list(rows), int(time.time() * 1000)
    times = list(times) if times is not None else [now] * len(rows)
    if summary is not None and summary.metrics():
        rows, times = rows + [{"round": final_round, **summary.metrics()}], times + [now]
    store.log_rows(run_id, rows, times, params=params,
                   tags={STATUS: status, FINAL_ROUND: final_round})
    store.client.set_terminated(run_id, "FAILED" if status == "error" else "FINISHED")


class RunLog:
    """One configuration logged as one MLflow run, the way `fco-ray run` logs it: params =
    the config, a metric per column at step = round as the rows come, `fco.status`, the
    best / mean summaries, and the final model (E6: also its attack) as artifacts.
    The store is checked at once (`check_store`); the run is created with the first row (or
    at the end of a run without rows), so a run that cannot start (its backend or device is
    not there) leaves no MLflow run behind."""

    def __init__(self, cfg, uri: str | None = None):
        uri = uri or cfg.tracking.uri or default_uri()
        check_store(uri)
        self.cfg, self.store, self.summary = cfg, Store(uri), Summary()
        self.run_id: str | None = None

    def _start(self) -> str:
        if self.run_id is None:
            config = self.cfg.model_dump(mode="json")
            self.run_id = start_single_run(self.store, config, f"{run_label(config)} {self.cfg.problem.name}")
        return self.run_id

    def add(self, row: dict) -> None:
        self.store.log_rows(self._start(), [row])
        self.summary.add(row)

    def fail(self) -> None:
        if self.run_id is not None:  # a run that never started has nothing to close
            close_run(self.store, self.run_id, "error", 0)

    def close(self, status: str, final_round: int, model: dict | None) -> None:
        if model is not None:  # the final model (and E6's attack image) as run artifacts
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                write_artifacts(self.cfg, model, Path(tmp))
                self.store.client.log_artifacts(self._start(), tmp)
        close_run(self.store, self._start(), status, final_round, self.summary)

    def url(self) -> str:
        """The run's page in the MLflow UI."""
        experiment = self.store.experiment_id(self.cfg.tracking.experiment, create=False)
        return run_url(ui_base(self.store.uri), experiment, self.run_id)
