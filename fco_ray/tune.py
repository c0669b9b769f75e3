"""Sweep files -> a Ray Tune run whose trials are logged to MLflow from the driver.

A sweep file (README "Sweep files") names a problem, the algorithms, fixed hyperparameters,
a grid and/or random search space over dotted config keys, seeds, and the Tune settings.
Each trial is one run config (`fco_ray.run`), identified by its *point*: a flat dict
`{"algorithm.name": ..., "seed": ..., <searched dotted key>: value, ...}`. All trial configs
are validated before Tune starts. Trials report every evaluated round with
`tune.report({...metrics, "round": r, "timesteps_total": r, "status": s})`; a diverged trial
ends with a last report whose metric is the worst value (+inf for min, -inf for max), so it
ranks last, and the sweep carries on. MLflow runs are written by callbacks on the driver.

Faults: the tracking store is checked before Ray starts (`tracking.check_store`): an
unreachable store fails the sweep before any trial runs; a store lost later stops the sweep
with the `--resume` command, which reruns the unfinished trials and logs what is missing.
A trial whose process fails (killed, node lost, an error) is rerun by Tune from round 0, at
most `tune.max_failures` times: trials do not checkpoint, since a rerun with the same seed
recomputes the same rows; its MLflow child run continues after the last round it logged
(no round twice).
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import ray
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from ray import tune
from ray.tune.result import AUTO_RESULT_KEYS
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import BasicVariantGenerator

from .algorithms import ALGORITHMS
from .api import make_problem, run
from .backends.ray_backend import STRATEGIES, trial_bundles
from .config import ConfigError, apply_overrides, load_yaml, parse_run, validate_model
from .engine import INIT_TAG, evaluate
from .problems.base import Problem
from .random import generator
from .tracking import SweepLog, Store, TrackingUnavailable, check_store, default_uri

FIXED_POINT_KEYS = ("algorithm.name", "seed")  # set by `algorithms` and `seeds`, not `search`


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Distribution(_Strict):
    """One random-search axis: exactly one of loguniform [lo, hi], uniform [lo, hi], choice."""

    loguniform: tuple[float, float] | None = None
    uniform: tuple[float, float] | None = None
    choice: list[Any] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [k for k in ("loguniform", "uniform", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of loguniform, uniform, choice; got {given or 'none'}")
        bounds = self.loguniform or self.uniform
        if bounds is not None and not bounds[0] < bounds[1]:
            raise ValueError(f"needs low < high, got {list(bounds)}")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise ValueError(f"loguniform needs low > 0, got {self.loguniform[0]}")
        return self

    def domain(self):
        if self.loguniform:
            return tune.loguniform(*self.loguniform)
        if self.uniform:
            return tune.uniform(*self.uniform)
        return tune.choice(self.choice)

    def extremes(self) -> list:
        """The values that bound what a sample can be (validated before the sweep starts)."""
        return list(self.loguniform or self.uniform or self.choice)


class Search(_Strict):
    grid: dict[str, list[Any]] = {}
    random: dict[str, Distribution] = {}
    samples: int = Field(1, ge=1, description="random draws (each one crossed with the grid)")
    seed: int = Field(0, ge=0, description="seed of the random search")

    @model_validator(mode="after")
    def _keys(self):
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"grid {key!r} has no values")
        both = set(self.grid) & set(self.random)
        if both:
            raise ValueError(f"keys both in grid and random: {sorted(both)}")
        for key in [*self.grid, *self.random]:
            if key in FIXED_POINT_KEYS:
                raise ValueError(f"{key!r} cannot be searched: list them in "
                                 f"{'algorithms' if key == 'algorithm.name' else 'seeds'}")
            if key.split(".")[0] == "tracking":
                raise ValueError(f"{key!r} cannot be searched (one tracking store per sweep)")
        return self


class TuneSettings(_Strict):
    metric: str = "train_loss"
    mode: Literal["min", "max"] = "min"
    max_concurrent: int | None = Field(None, ge=1)
    scheduler: Literal["none", "asha"] = "none"
    grace_period: int | None = Field(None, ge=1, description="rounds before ASHA may stop a "
                                     "trial; default: a tenth of the rounds")
    reduction_factor: float = Field(3.0, gt=1)
    cpus_per_trial: float = Field(1.0, gt=0, description="CPUs of the trial's own process")
    max_failures: int = Field(2, ge=0, description="reruns of a trial whose process failed "
                              "(killed, node lost, error); each rerun starts from round 0")


class SweepTracking(_Strict):
    experiment: str | None = Field(None, min_length=1, description="default: the sweep name")
    uri: str | None = None


class SweepFile(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    problem: dict[str, Any]
    algorithms: list[str | dict[str, Any]] = Field(min_length=1)
    algorithm: dict[str, Any] = {}
    search: Search = Search()
    seeds: list[int] = Field([0], min_length=1)
    rounds: int = Field(100, ge=1)
    eval_every: int = Field(10, ge=1)
    backend: dict[str, Any] = {"name": "local"}
    tune: TuneSettings = TuneSettings()
    tracking: SweepTracking = SweepTracking()
    report: Any = None  # read by `fco-ray report`

    @model_validator(mode="after")
    def _algorithms(self):
        if "name" in self.algorithm:
            raise ValueError("'algorithm' holds hyperparameters shared by all algorithms; "
                             "put names in 'algorithms'")
        names = [a if isinstance(a, str) else a.get("name") for a in self.algorithms]
        if any(not isinstance(n, str) for n in names):
            raise ValueError("every entry of 'algorithms' is a name or a mapping with a 'name'")
        if len(set(names)) != len(names):
            raise ValueError(f"algorithm names must be unique, got {names} "
                             "(sweep a hyperparameter with search.grid instead)")
        if any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be >= 0, got {self.seeds}")
        searched = {*self.search.grid, *self.search.random}
        for entry in [self.algorithm, *(a for a in self.algorithms if isinstance(a, dict))]:
            fixed = sorted(f"algorithm.{k}" for k in entry if f"algorithm.{k}" in searched)
            if fixed:
                raise ValueError(f"{fixed} both fixed (in {entry}) and searched: keep one")
        return self


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: the file's settings plus everything derived from them."""

    spec: SweepFile
    source: str  # the sweep as YAML (the file, or its resolved form after --set)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def metric(self) -> str:
        return self.spec.tune.metric

    @property
    def mode(self) -> str:
        return self.spec.tune.mode

    @property
    def experiment(self) -> str:
        return self.spec.tracking.experiment or self.spec.name

    @property
    def tracking_uri(self) -> str:
        return self.spec.tracking.uri or default_uri()

    def algorithms(self) -> dict[str, dict]:
        """Algorithm name -> its section (shared hyperparameters, then its own)."""
        out = {}
        for entry in self.spec.algorithms:
            entry = {"name": entry} if isinstance(entry, str) else entry
            out[entry["name"]] = {**self.spec.algorithm, **entry}
        return out

    def param_space(self) -> dict:
        space = {"algorithm.name": tune.grid_search(list(self.algorithms())),
                 "seed": tune.grid_search(self.spec.seeds)}
        space.update({k: tune.grid_search(v) for k, v in self.spec.search.grid.items()})
        space.update({k: d.domain() for k, d in self.spec.search.random.items()})
        return space

    def num_trials(self) -> int:
        grid = math.prod(len(v) for v in self.spec.search.grid.values())
        return len(self.spec.algorithms) * len(self.spec.seeds) * grid * self.spec.search.samples

    def points(self):
        """Every grid point, with each random axis at each of its extreme values."""
        axes = {"algorithm.name": list(self.algorithms()), "seed": self.spec.seeds,
                **self.spec.search.grid,
                **{k: d.extremes() for k, d in self.spec.search.random.items()}}
        for values in itertools.product(*axes.values()):
            yield dict(zip(axes, values))

    def trial_config(self, point: dict) -> dict:
        """The run config of one trial (the `fco_ray.run` schema)."""
        spec = self.spec
        config = {"problem": copy.deepcopy(spec.problem),
                  "algorithm": dict(self.algorithms()[point["algorithm.name"]]),
                  "rounds": spec.rounds, "eval_every": spec.eval_every, "seed": point["seed"],
                  "backend": copy.deepcopy(spec.backend)}
        for key, value in point.items():
            if key not in FIXED_POINT_KEYS:
                *parents, last = key.split(".")
                node = config
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = value
        return config

    def final_report(self, metrics: dict, rnd: int, status: str) -> dict:
        """The last Tune result of a trial; a diverged trial gets the worst metric value."""
        report = {**metrics, "round": rnd, "timesteps_total": rnd, "status": status}
        if status == "diverged":
            report[self.metric] = math.inf if self.mode == "min" else -math.inf
        return report


def _validate_sweep(raw: dict, path: str | Path) -> SweepFile:
    try:
        return validate_model(SweepFile, raw, "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def read_sweep_file(path: str | Path, overrides: list[str] = ()) -> SweepFile:
    """Read a sweep file, apply `key.path=value` overrides, validate its own keys."""
    return _validate_sweep(apply_overrides(load_yaml(path), list(overrides)), path)


def load_sweep(path: str | Path, overrides: list[str] = ()) -> Sweep:
    """Read, override (`key.path=value`), and validate a sweep file and all its trials.

    Raises `ConfigError` (naming the file, key, value and what is allowed) on any problem,
    before any Ray or Tune work.
    """
    path = Path(path)
    raw = apply_overrides(load_yaml(path), list(overrides))
    spec = _validate_sweep(raw, path)
    source = yaml.safe_dump(raw, sort_keys=False) if overrides else path.read_text()
    sweep = Sweep(spec, source)
    by_problem: dict[str, list] = {}  # one problem section -> its trials (point, config)
    for point in sweep.points():
        try:
            cfg = parse_run(sweep.trial_config(point))
        except ConfigError as e:
            raise ConfigError(f"{path}: trial ({_point_text(point)}): {e}") from None
        key = json.dumps(cfg.problem.model_dump(mode="json"), sort_keys=True)
        by_problem.setdefault(key, []).append((point, cfg))
    for trials in by_problem.values():
        _check_against_problem(sweep, trials, path)
    return sweep


def _point_text(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def _check_against_problem(sweep: Sweep, trials: list, path: Path) -> None:
    """What only the built problem can tell, for the trials sharing one problem section:
    its data can be read (e.g. `problem.path` exists), each trial's clients_per_round fits
    its training clients, and the Tune metric is one each algorithm reports (checked at
    the initial model)."""
    try:
        problem = make_problem(trials[0][1])
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    checked = set()
    for point, cfg in trials:
        per_round = cfg.algorithm.clients_per_round
        if per_round is not None and per_round > problem.num_clients:
            raise ConfigError(
                f"{path}: trial ({_point_text(point)}): algorithm.clients_per_round must be "
                f"<= {problem.num_clients} (problem {cfg.problem.name!r} has {problem.num_clients} "
                f"training clients), got {per_round}")
        name = cfg.algorithm.name
        if name in checked:
            continue
        checked.add(name)
        algorithm = ALGORITHMS[name](cfg.algorithm)
        try:
            state = algorithm.server_init(problem, problem.init_params(generator(cfg.seed, INIT_TAG)))
        except ValueError as e:  # e.g. an algorithm that needs another kind of problem
            raise ConfigError(f"{path}: algorithm {name!r} on problem {cfg.problem.name!r}: {e}") from None
        reported = {"round", "floats_up", "floats_down", *evaluate(problem, algorithm, state)}
        if sweep.metric not in reported:
            raise ConfigError(f"{path}: tune.metric: {sweep.metric!r} is not reported by "
                              f"{name} on problem {cfg.problem.name!r}; allowed: {sorted(reported)}")


class _TrialResources:
    """Per-trial placement group, from the trial's own backend config (it may be searched):
    bundle 0 for the trial process (`tune.cpus_per_trial` CPUs), one per client actor."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep

    def __call__(self, point: dict):
        backend = parse_run(self.sweep.trial_config(point)).backend
        bundles = trial_bundles(backend.model_dump())
        strategy = STRATEGIES[backend.placement] if backend.name == "ray" else "PACK"
        return tune.PlacementGroupFactory(
            [{"CPU": self.sweep.spec.tune.cpus_per_trial}] + bundles[1:], strategy=strategy)


def train_trial(point: dict, sweep: Sweep, finished: dict) -> None:
    """The Tune trainable: one `fco_ray.run`, reporting every evaluated round."""
    done = finished.get(tune.get_context().get_trial_id())
    if done is not None:  # finished before an interruption (known from MLflow): don't redo it
        tune.report(sweep.final_report(done["metrics"], done["round"], done["status"]))
        return
    config = sweep.trial_config(point)
    problem = _problem_of(config)
    last = {"round": 0}

    def on_eval(row: dict) -> None:
        last["round"] = row["round"]
        status = "finished" if row["round"] == config["rounds"] else "running"
        tune.report({**row, "timesteps_total": row["round"], "status": status})

    try:
        diverged = run(config, problem=problem, on_eval=on_eval).attrs["status"] == "diverged"
    except np.linalg.LinAlgError:
        # an SVD of a non-finite client iterate (nuclear prox) fails before the engine
        # sees the non-finite values: that is divergence too
        diverged = True
    if diverged:
        tune.report(sweep.final_report({}, last["round"], "diverged"))


#: The last problem built in this trial process, with its key. Tune reuses trial processes
#: (`reuse_actors`) and orders grid trials seed by seed, so consecutive trials mostly share
#: their problem (building E1's data: benchmarks/results/step_profile.md). One problem at
#: most, the one the process held anyway. Runs do not modify problems, except for state
#: kept with the client data per run (CoCoA+'s duals in `train.memory`), dropped on reuse.
_last_problem: tuple[str, Problem] | None = None


def _problem_of(config: dict) -> Problem:
    """The trial's problem: built from its problem section and seed, or the last one built
    in this process from the same ones."""
    global _last_problem
    cfg = parse_run(config)
    key = json.dumps([cfg.problem.model_dump(mode="json"), cfg.seed], sort_keys=True)
    if _last_problem is None or _last_problem[0] != key:
        _last_problem = None  # free the old problem's memory before building the new one
        _last_problem = (key, make_problem(cfg))
    problem = _last_problem[1]
    memory = getattr(problem.train, "memory", None)
    if memory:  # earlier trials' per-run client state (e.g. CoCoA+ duals)
        memory.clear()
    return problem


def trial_name(trial) -> str:
    """Readable trial names: algorithm, searched values, seed (e.g. fedmid_client_lr=0.001_seed0)."""
    point = trial.config
    values = [f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
              for k, v in point.items() if k not in FIXED_POINT_KEYS]
    return "_".join([point["algorithm.name"], *values, f"seed{point['seed']}"])


def trial_dirname(trial) -> str:
    return trial.trial_id


def _metrics_row(result: dict) -> dict:
    """The engine's metrics row inside a Tune result (without Tune's bookkeeping)."""
    skip = set(AUTO_RESULT_KEYS) | {"status"}
    return {k: v for k, v in result.items() if k not in skip}


class _Driver(tune.Callback):
    """Driver-side hooks: MLflow child runs (SQLite is written by this process only) and
    one progress line per finished trial.

    If an MLflow write fails (the store went away), nothing more is written and the sweep
    stops at the end of Tune's step (`on_step_end` raises; Tune propagates exceptions from
    there, not from the trial callbacks): trials stay as they are, so `--resume` reruns the
    unfinished ones and logs what is missing."""

    def __init__(self, sweep: Sweep, log: SweepLog, echo: Callable[[str], None]):
        self.sweep, self.log, self.echo = sweep, log, echo
        self.skipped = set(log.finished())
        self.completed = len(self.skipped)
        self.store_error: Exception | None = None

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

    def __reduce__(self):
        # Tune pickles the RunConfig with the experiment; the live MLflow state must not be
        # pickled (a resumed sweep gets fresh callbacks, see `run_sweep`).
        return (_Inert, ())

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id not in self.skipped:
            config = parse_run(self.sweep.trial_config(trial.config)).model_dump(mode="json")
            self._write(self.log.start, trial.trial_id, config, str(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("status") in ("running", "finished"):
            self._write(self.log.add_row, trial.trial_id, _metrics_row(result))

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


class _Inert(tune.Callback):
    """What a pickled `_Driver` becomes: nothing (its replacement is set on restore)."""


class SweepInterrupted(RuntimeError):
    """Tune returned before every trial ended; the MLflow parent run stays RUNNING."""


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


SWEEP_COPY = "fco_sweep.yaml"  # the resolved sweep kept with Tune's state, checked on resume


def run_sweep(path: str | Path, overrides: list[str] = (), *, resume: bool = False,
              storage: str | Path | None = None,
              echo: Callable[[str], None] = partial(print, flush=True)) -> SweepOutcome:
    """Run (or resume) a sweep file on the current Ray cluster; what `fco-ray sweep` does.

    Connects to `RAY_ADDRESS` if set, else starts a local Ray cluster (unless Ray is
    already initialized in this process). Tune's state lives in `<storage>/<name>`
    (default storage: `./ray_results`); `resume=True` restores it, reruns unfinished and
    errored trials, and reuses the MLflow parent and child runs.
    """
    sweep = load_sweep(path, overrides)
    root = Path(storage or Path.cwd() / "ray_results").resolve()
    exp_dir = root / sweep.name
    resolved = yaml.safe_dump(sweep.spec.model_dump(mode="json"), sort_keys=True)
    if resume:
        if not tune.Tuner.can_restore(str(exp_dir)):
            raise ConfigError(f"--resume: no sweep state to resume at {exp_dir} "
                              "(run without --resume, or pass the --storage it used)")
        kept = exp_dir / SWEEP_COPY
        if kept.is_file() and kept.read_text() != resolved:
            raise ConfigError(f"--resume: {path} (with these --set values) differs from the "
                              f"sweep being resumed ({kept}); resume with the same file and values")
    check_store(sweep.tracking_uri)  # fail fast: before Ray starts and any trial runs
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address=os.environ.get("RAY_ADDRESS") or "local")
    try:
        store = Store(sweep.tracking_uri)
        log = SweepLog(store, sweep.experiment, sweep.name, sweep.metric, sweep.mode,
                       sweep.source, resume)
        echo(f"sweep {sweep.name}: {sweep.num_trials()} trials; Tune state {exp_dir}; "
             f"MLflow {store.uri} experiment {sweep.experiment!r}")
        driver = _Driver(sweep, log, echo)
        callbacks = [driver, *tune_loggers()]
        trainable = tune.with_resources(
            tune.with_parameters(train_trial, sweep=sweep, finished=log.finished()),
            _TrialResources(sweep))
        if resume:
            tuner = tune.Tuner.restore(str(exp_dir), trainable, resume_errored=True)
            # restore brings back the RunConfig pickled at the first start; put in this
            # driver's live callbacks
            tuner._local_tuner.get_run_config().callbacks = callbacks
        else:
            tuner = tune.Tuner(trainable, param_space=sweep.param_space(),
                               tune_config=_tune_config(sweep),
                               run_config=tune.RunConfig(
                                   name=sweep.name, storage_path=str(root), callbacks=callbacks,
                                   verbose=0, failure_config=tune.FailureConfig(
                                       max_failures=sweep.spec.tune.max_failures)))
            exp_dir.mkdir(parents=True, exist_ok=True)
            (exp_dir / SWEEP_COPY).write_text(resolved)
        try:
            with _tune_env(TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1"):  # our loggers: tune_loggers
                results = tuner.fit()
        except TrackingUnavailable as e:  # the MLflow store went away (see _Driver)
            raise SweepInterrupted(
                f"sweep {sweep.name} stopped: {e}; the rounds logged so far are kept: once "
                f"the store works, finish it with: fco-ray sweep {path} --resume") from None
        if driver.completed < sweep.num_trials():  # Tune stopped early (e.g. Ctrl-C)
            raise SweepInterrupted(
                f"sweep {sweep.name} stopped with {driver.completed}/{sweep.num_trials()} trials "
                f"done; finish it with: fco-ray sweep {path} --resume")
        best = log.finish(failed=results.num_errors > 0)
        if sweep.spec.report is not False:  # `report: false` in the sweep file: no report
            from .report import report_after_sweep  # matplotlib only when a report is drawn

            report_after_sweep(log.parent_id, store.uri, echo)
        return SweepOutcome(log.parent_id, log.experiment_id, store.uri, exp_dir, results,
                            results.num_errors, best)
    finally:
        if started_ray:
            ray.shutdown()


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


def tune_loggers() -> list:
    """Tune's own per-trial result files: `result.json` and `progress.csv` in each trial's
    directory, as Tune writes by default, but not its TensorBoard event files (MLflow is
    this platform's store). Tune adds all three unless TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1,
    which `run_sweep` sets around `fit`: the TensorBoard writer adds driver work to every reported round
    and its files duplicate what MLflow holds (benchmarks/README.md)."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [JsonLoggerCallback(), CSVLoggerCallback()]


def _tune_config(sweep: Sweep) -> tune.TuneConfig:
    settings = sweep.spec.tune
    scheduler = None
    if settings.scheduler == "asha":
        rounds = max(parse_run(sweep.trial_config(p)).rounds for p in sweep.points())
        scheduler = ASHAScheduler(
            time_attr="round", max_t=rounds, grace_period=settings.grace_period or max(1, rounds // 10),
            reduction_factor=settings.reduction_factor)
    return tune.TuneConfig(
        metric=settings.metric, mode=settings.mode, scheduler=scheduler,
        num_samples=sweep.spec.search.samples,
        # Tune ignores max_concurrent_trials when a search_alg is given: the generator limits it
        search_alg=BasicVariantGenerator(random_state=sweep.spec.search.seed,
                                         max_concurrent=settings.max_concurrent or 0),
        trial_name_creator=trial_name, trial_dirname_creator=trial_dirname,
        reuse_actors=True)  # a new trial process costs seconds (imports); trials are stateless
