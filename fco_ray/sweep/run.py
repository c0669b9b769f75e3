"""Orchestration: a sweep file -> a Ray Tune run whose trials are logged to MLflow.

Faults: the tracking store is checked before Ray starts (`tracking.check_store`): an
unreachable store fails the sweep before any trial runs; a store lost later stops the
sweep with the `--resume` command, which reruns the unfinished trials and logs what is
missing. A trial whose process fails (killed, node lost, an error) is rerun by Tune, at
most `tune.max_failures` times, from its last checkpoint (round 0 if none): it computes
the same rows as before, and its MLflow child run continues after the last round it logged.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import ray
import yaml
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import BasicVariantGenerator

from ..backends.cluster import check_cluster_fits, connect, disconnect, new_local_cluster_cpus
from ..runtime.errors import ConfigError
from ..runtime.files import check_private_tree, write_file
from ..tracking.store import Store, TrackingUnavailable
from ..tracking.sweeps import SweepLog
from .logging import MLflowLogger
from .checks import check_tracking, load_sweep
from .storage import StorageFull, StorageGuard, check_room, sweep_lock
from .sweep import Sweep
from .trial_files import TrialFiles
from .trainable import TrialResources, registrations, train_trial, trial_dirname, trial_name

SWEEP_COPY = "fco_sweep.yaml"  # the resolved sweep kept with Tune's state, checked on resume


class SweepInterrupted(RuntimeError):
    """Tune returned before every trial ended (Ctrl-C, SIGTERM, a full disk, a lost store);
    the MLflow parent run is ended KILLED (unless the store is the problem), and `--resume`
    reopens it."""


@dataclass
class SweepOutcome:
    parent_run_id: str
    experiment_id: str
    tracking_uri: str
    path: Path  # Tune's experiment directory
    results: Any  # ray.tune.ResultGrid
    errors: int
    best: Any  # pandas.DataFrame: tracking.best_per_algorithm of the finished sweep

    @property
    def ok(self) -> bool:
        return self.errors == 0


def run_sweep(path: str | Path, overrides: list[str] = (), *, resume: bool = False,
              storage: str | Path | None = None,
              echo: Callable[[str], None] = partial(print, flush=True),
              sweep: Sweep | None = None) -> SweepOutcome:
    """Run (or resume) a sweep file on the current Ray cluster; what `fco-ray sweep` does.

    Joins the Ray cluster at `RAY_ADDRESS` if set, else starts a new local one on loopback
    (unless Ray is already initialized in this process): `fco_ray.backends.cluster.connect`.
    Tune's state lives in `<storage>/<name>`
    (default storage: `./ray_results`); `resume=True` restores it (`Tuner.restore`), reruns
    unfinished and errored trials, and reuses the MLflow parent and child runs.
    `sweep`: the file and overrides already loaded (`load_sweep(path, overrides)`), as the
    CLI does before it imports Ray and MLflow.
    """
    sweep = sweep or load_sweep(path, overrides)
    root = Path(storage or Path.cwd() / "ray_results").resolve()
    exp_dir = root / sweep.name
    resolved = yaml.safe_dump(sweep.spec.model_dump(mode="json"), sort_keys=True)
    if resume:
        if exp_dir.exists():  # Tune restores its state by unpickling: only our own files
            check_private_tree(exp_dir, "--resume")
        if not tune.Tuner.can_restore(str(exp_dir)):
            raise ConfigError(f"--resume: no sweep state to resume at {exp_dir} "
                              "(run without --resume, or pass the --storage it used)")
        kept = exp_dir / SWEEP_COPY
        if kept.is_file() and kept.read_text() != resolved:
            raise ConfigError(f"--resume: {path} (with these --set values) differs from the "
                              f"sweep being resumed ({kept}); resume with the same file and values")
    check_tracking(sweep)  # fail fast: before Ray starts and any trial runs
    trials = _trial_bundles(sweep)
    nodes = new_local_cluster_cpus()
    if nodes is not None:  # the local cluster this sweep would start: refused before it starts
        check_cluster_fits(trials, nodes, "the local Ray cluster")
    _make_storage_dir(root)  # and before the MLflow parent run exists
    check_room(root)  # a full disk would truncate Tune's state (storage.py)
    with sweep_lock(root, sweep.name):  # one live driver per sweep name and storage
        return _run_locked(sweep, path, root, exp_dir, resolved, resume, echo, trials)


def _run_locked(sweep: Sweep, path, root: Path, exp_dir: Path, resolved: str, resume: bool,
                echo, trials: dict) -> SweepOutcome:
    connection = connect()  # the cluster at RAY_ADDRESS, else a new local one on loopback
    try:
        with _StopSignals() as stops:  # after connect: ray.init sets a SIGTERM handler
            _check_resources(sweep, trials, connection, echo)
            store = Store(sweep.tracking_uri)
            if not resume:
                for line in earlier_sweep(store, sweep, exp_dir):
                    echo(line)
            log = SweepLog(store, sweep.experiment, sweep.name, sweep.metric, sweep.mode,
                           sweep.source, resume)
            try:
                return _fit(sweep, path, root, exp_dir, resolved, resume, echo, store, log, stops)
            except KeyboardInterrupt:  # a second Ctrl-C / SIGTERM, or one outside Tune's fit
                with contextlib.suppress(Exception):  # the interrupt is what to report
                    log.interrupted()
                raise
    finally:
        disconnect(connection)


class _StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM -- what a scheduler, a container stop or `ray job stop`
    sends -- stop a sweep the same way. While Tune fits, the first one asks Tune to stop
    (its SIGUSR1 handler: trials stop, its state is saved) and is recorded in `received`,
    so the sweep ends with the `--resume` command (Tune itself returns as if all was done:
    the stopped trials count as terminated); a second one, or one outside the fit, is a
    KeyboardInterrupt. Tune's own SIGINT handler is turned off (TUNE_DISABLE_SIGINT_HANDLER)."""

    def __init__(self):
        self.received: str | None = None
        self.fitting = False
        self._before: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._before = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, handler in self._before.items():
            signal.signal(s, handler)

    @contextmanager
    def fit(self):
        self.fitting = True
        try:
            yield
        finally:
            self.fitting = False

    def _handle(self, signum, frame):
        tune_stop = signal.getsignal(signal.SIGUSR1)  # installed by Tune when its run starts
        if self.received is not None or not self.fitting or not callable(tune_stop):
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        tune_stop(signal.SIGUSR1, frame)


def _fit(sweep: Sweep, path, root: Path, exp_dir: Path, resolved: str, resume: bool, echo,
         store: Store, log: SweepLog, stops: _StopSignals) -> SweepOutcome:
    """Tune's run of the sweep (new or restored), its end in MLflow and its report."""
    echo(f"sweep {sweep.name}: {_trials_text(sweep)}; Tune state {exp_dir}; "
         f"MLflow {store.uri} experiment {sweep.experiment!r}")
    # the problems the driver built to check the sweep, one object each in Ray's object
    # store (the driver keeps no copy): a trial fetches only its own. They stay there while
    # this process is connected to Ray (Tune's parameter registry holds them).
    problems = {key: ray.put(problem) for key, problem in sweep.problems.items()}
    sweep.problems.clear()
    trainable = tune.with_resources(
        tune.with_parameters(train_trial, sweep=sweep, finished=log.finished(), problems=problems,
                             registered=registrations(sweep)),
        TrialResources(sweep))
    if resume:  # the logger comes back with Tune's state (see MLflowLogger.__reduce__)
        from . import schema

        # state saved before the runtime sweep got its own module pickled it as schema.Sweep
        schema.Sweep = Sweep
        tuner = tune.Tuner.restore(str(exp_dir), trainable, resume_errored=True)
    else:
        logger = MLflowLogger(sweep, store.uri, echo)
        tuner = tune.Tuner(trainable, param_space=sweep.param_space(),
                           tune_config=tune_config(sweep),
                           run_config=tune.RunConfig(
                               name=sweep.name, storage_path=str(root),
                               callbacks=[logger, StorageGuard(str(root)), TrialFiles()],
                               verbose=0,
                               # every checkpoint is kept (~10 per trial, each one
                               # state of the trial's models): with num_to_keep=1 Tune
                               # deletes the previous one before its experiment state
                               # stops naming it, and a sweep killed in between could
                               # not resume (tests/ray/test_resume.py, under load)
                               checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
                               failure_config=tune.FailureConfig(
                                   max_failures=sweep.spec.tune.max_failures)))
        exp_dir.mkdir(parents=True, exist_ok=True)
        write_file(exp_dir / SWEEP_COPY, resolved)
    try:
        with _tune_env(TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1",  # ours: TrialFiles
                       TUNE_DISABLE_SIGINT_HANDLER="1"), stops.fit():  # _StopSignals instead
            results = tuner.fit()
    except TrackingUnavailable as e:  # the MLflow store went away (see MLflowLogger)
        raise SweepInterrupted(
            f"sweep {sweep.name} stopped: {e}; the rounds logged so far are kept: once "
            f"the store works, finish it with: fco-ray sweep {path} --resume") from None
    except StorageFull as e:
        log.interrupted()
        raise SweepInterrupted(
            f"sweep {sweep.name} stopped: {e}; its state is kept: once space is freed, "
            f"finish it with: fco-ray sweep {path} --resume") from None
    ended = results.num_terminated + results.num_errors
    if stops.received or ended < sweep.num_tune_trials():  # Ctrl-C, SIGTERM
        log.interrupted()
        by = f" by {stops.received}" if stops.received else ""
        raise SweepInterrupted(
            f"sweep {sweep.name} stopped{by} before all of its {sweep.num_tune_trials()} Tune "
            f"trials ended (its state is saved); finish it with: fco-ray sweep {path} --resume")
    best = log.finish(failed=results.num_errors > 0)
    if sweep.spec.report is not False:  # `report: false` in the sweep file: no report
        from ..report import (
            report_after_sweep,  # matplotlib only when a report is drawn
        )

        report_after_sweep(log.parent_id, store.uri, echo)
    return SweepOutcome(log.parent_id, log.experiment_id, store.uri, exp_dir, results,
                        results.num_errors, best)


def earlier_sweep(store: Store, sweep: Sweep, exp_dir: Path) -> list[str]:
    """What a new run of a sweep does to an earlier one of the same name, said before it
    starts: MLflow gets a second parent run beside the first (`fco-ray runs`, `report` and
    the printed link read the newest), and Tune writes its new state beside the old one in
    the same folder (`--resume` resumes the newest)."""
    from ..tracking.queries import find_parent

    exp_id = store.experiment_id(sweep.experiment, create=False)
    parent = find_parent(store, exp_id, sweep.name) if exp_id is not None else None
    old_state = exp_dir.is_dir() and any(exp_dir.glob("experiment_state*.json"))
    if parent is None and not old_state:
        return []
    lines = [f"note: sweep {sweep.name} ran before; this run starts anew and keeps the earlier one:"]
    if parent is not None:
        lines.append(f"  MLflow experiment {sweep.experiment!r} already has its parent run "
                     f"{parent.info.run_id} ({parent.info.status}); a second parent run is added "
                     "beside it, and fco-ray runs, fco-ray report and the printed link show the newest")
    if old_state:
        lines.append(f"  Tune's state of the earlier run stays in {exp_dir}, the new one is written "
                     "beside it; --resume resumes the newest")
    lines.append("  to keep runs apart, give this one another name (--set name=NEW) or store "
                 "(--set tracking.uri=..., --storage DIR)")
    return lines


def _trial_bundles(sweep: Sweep) -> dict[str, list[dict]]:
    """Each kind of trial's placement-group bundles, by a description of its backend keys
    (only the backend section matters: each distinct one once)."""
    from .trainable import trial_bundles

    trials, seen = {}, set()
    for point in sweep.grid_points():
        section = json.dumps(sweep.trial_config(point)["backend"], sort_keys=True, default=str)
        if section in seen:
            continue
        seen.add(section)
        backend = sweep.run_config(point).backend
        trials.setdefault(backend.describe() + f", tune.cpus_per_trial={sweep.spec.tune.cpus_per_trial:g}",
                          trial_bundles(backend, sweep.spec.tune.cpus_per_trial))
    return trials


def _check_resources(sweep: Sweep, trials: dict, connection, echo) -> None:
    """Every trial's placement group (`trials`: `_trial_bundles`) must fit the cluster, else
    Tune waits for it without end; on a new local cluster this checks again against the CPUs
    Ray found (`run_sweep` checked this machine's before Ray started). On the local cluster
    fco-ray started that is an error (exit 2); a joined cluster may grow (an autoscaler), so
    there it is a warning."""
    from ..core.checks import check_gpus_fit

    alive = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    nodes, gpus = [r.get("CPU", 0.0) for r in alive], [r.get("GPU", 0.0) for r in alive]
    where = "the local Ray cluster" if connection.started else f"the Ray cluster at {connection.address}"
    try:
        check_cluster_fits(trials, nodes, where)
        check_gpus_fit(sweep.spec.tune.gpus_per_trial, gpus, where)
    except ConfigError as e:
        if connection.started:
            raise
        echo(f"warning: {e} (Tune waits until the cluster has them)")


def _trials_text(sweep: Sweep) -> str:
    """How many configurations (MLflow runs, the `[k/N]` lines) and Tune trials (Tune's
    "Number of trials") the sweep has, and why they differ when configurations are fused."""
    configs, tune_trials = sweep.num_trials(), sweep.num_tune_trials()
    if configs == tune_trials:
        return f"{configs} configurations, one Tune trial each"
    return (f"{configs} configurations in {tune_trials} Tune trials (fused: the configurations "
            f"of one algorithm and seed that differ only in real-valued rates run as one "
            f"stacked computation, one Tune trial; Tune's \"Number of trials\" counts those, "
            f"the [k/{configs}] lines and MLflow count configurations)")


def _make_storage_dir(root: Path) -> None:
    """Create Tune's storage directory now: one that cannot be (a file, no permission)
    fails here, before Ray starts and before the sweep's MLflow parent run exists."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"--storage {root}: not a directory") from None
    except OSError as e:
        raise ConfigError(f"--storage {root}: cannot be created ({e.strerror or e})") from None
    if not root.is_dir():
        raise ConfigError(f"--storage {root}: not a directory")
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(f"--storage {root}: not writable")


@contextmanager
def _tune_env(**values: str):
    """Environment variables for Tune, set for the duration of one `fit` and then restored
    (other Tune runs in the same process keep Tune's defaults)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def tune_config(sweep: Sweep) -> tune.TuneConfig:
    settings = sweep.spec.tune
    scheduler = None
    if settings.scheduler == "asha":
        rounds = max(sweep.spec.search.grid.get("rounds", [sweep.spec.rounds]))
        scheduler = ASHAScheduler(
            time_attr="round", max_t=rounds, grace_period=settings.grace_period or max(1, rounds // 10),
            reduction_factor=settings.reduction_factor)
    return tune.TuneConfig(
        metric=settings.metric, mode=settings.mode, scheduler=scheduler,
        num_samples=1 if sweep.fused else sweep.spec.search.samples,  # fused: points drawn already
        # Tune ignores max_concurrent_trials when a search_alg is given: the generator limits it
        search_alg=BasicVariantGenerator(random_state=sweep.spec.search.seed,
                                         max_concurrent=settings.max_concurrent or 0),
        trial_name_creator=trial_name, trial_dirname_creator=trial_dirname,
        reuse_actors=True)  # a new trial process costs seconds (imports); trials are stateless

