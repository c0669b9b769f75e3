"""Sweep files: their schema, the trials they expand to, and validation before Tune starts.

A sweep file is a run config (`fco_ray.run`) plus `name`, `algorithms` (names, or mappings
of a name and its own fixed hyperparameters), `algorithm` (hyperparameters shared by the
algorithms that have them), `seeds`, `search` (grid and/or random axes over dotted config
keys) and `tune` settings. A trial is identified by its *point*, a flat dict
`{"algorithm.name": ..., "seed": ..., <searched dotted key>: value, ...}`.

Each algorithm declares its own hyperparameters, so an axis over `algorithm.X` applies only
to the algorithms that have X: a grid over `server_lr` does not repeat `gd` or
`centralized` trials (which have no server rate). Every trial's config is validated here,
once, with its problem's data read and sizes checked, but no model is run and no optimum
is solved.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..algorithms import ALGORITHMS
from ..core.checks import fitting_algorithms, unknown_name
from ..core.config import MAX_ROUNDS, RunConfig, parse_run, validate_model
from ..core.plan import build, check_problem, data_key
from ..core.plan import groups as config_groups
from ..problems import PROBLEMS
from ..problems.base import Problem
from ..runtime.errors import ConfigError, short_repr
from ..runtime.files import (
    MAX_SWEEP_NAME,
    SWEEP_NAME_PATTERN,
    apply_overrides,
    check_plain_name,
    load_yaml,
)
from ..runtime.strict import no_bool_numbers
from ..runtime.values import MAX_CONFIGURATIONS, check_grid_values

FIXED_POINT_KEYS = ("algorithm.name", "seed")
MAX_NAME = MAX_SWEEP_NAME  # characters of a sweep name
# What a sweep may expand to, checked by arithmetic before anything is expanded (Tune keeps
# an object per trial in the driver; 1000 x 1000 grid points took minutes and gigabytes
# just to validate). The paper's largest sweep (E5) has 2,250 configurations; at most
# MAX_CONFIGURATIONS (fco_ray.runtime.values: the same bound as `fco_ray.run_grid`).
MAX_SEEDS = 1_000
#: the problems the driver keeps for its trials take at most this share of the memory
#: available when the sweep is loaded (`ProblemParams.estimated_bytes`); the trials of
#: the others build their own
KEEP_SHARE = 0.25
MAX_FUSE = 1_024  # configurations per fused trial  # set by `algorithms` and `seeds`, not `search`


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bools = model_validator(mode="before")(no_bool_numbers)  # `seeds: [yes]` is an error


class Distribution(_Strict):
    """One random-search axis: exactly one of loguniform [lo, hi], uniform [lo, hi], choice."""

    loguniform: tuple[float, float] | None = None
    uniform: tuple[float, float] | None = None
    choice: list[Any] | None = Field(None, min_length=1, max_length=1000)

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
        from ray import tune

        if self.loguniform:
            return tune.loguniform(*self.loguniform)
        if self.uniform:
            return tune.uniform(*self.uniform)
        return tune.choice(self.choice)

    def draw(self, rng: np.random.Generator):
        """One sample (a fused sweep draws its random points itself, see `Sweep.drawn_points`)."""
        if self.loguniform:
            low, high = np.log(self.loguniform)
            return float(np.exp(rng.uniform(low, high)))
        if self.uniform:
            return float(rng.uniform(*self.uniform))
        return self.choice[int(rng.integers(len(self.choice)))]

    def extremes(self) -> list:
        """The values that bound what a sample can be (validated before the sweep starts)."""
        return list(self.loguniform or self.uniform or self.choice)


class Search(_Strict):
    grid: dict[str, list[Any]] = {}
    random: dict[str, Distribution] = {}
    samples: int = Field(1, ge=1, le=MAX_CONFIGURATIONS,
                         description="random draws (each one crossed with the grid)")
    seed: int = Field(0, ge=0, description="seed of the random search")

    @model_validator(mode="after")
    def _keys(self):
        for key, values in self.grid.items():
            check_grid_values(key, values)
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
    cpus_per_trial: float = Field(1.0, gt=0, allow_inf_nan=False,
                                  description="CPUs of the trial's own process")
    gpus_per_trial: float = Field(0.0, ge=0, le=16, allow_inf_nan=False,
                                  description="GPUs of the trial's own process, for trials with "
                                  "backend.device cuda; a fraction lets several trials (fused "
                                  "groups) share one GPU, e.g. 0.25: four per GPU")
    max_failures: int = Field(2, ge=0, description="reruns of a trial whose process failed "
                              "(killed, node lost, error); each resumes from its last checkpoint")
    checkpoint_every: int | None = Field(None, ge=0, description="rounds between trial "
                                         "checkpoints (a multiple of eval_every); 0 = none; "
                                         "default: about a tenth of the rounds")
    fuse: bool = Field(True, description="run configurations that differ only in real-valued "
                       "hyperparameters of one algorithm as one fused Tune trial (fco_ray.core.group)")
    fuse_max: int | None = Field(None, ge=1, le=MAX_FUSE, description="configurations per fused "
                                 "trial at most (each member keeps its own models in the trial's "
                                 "memory); null: 64, or 1024 on a device backend")


class SweepTracking(_Strict):
    # MLflow keeps experiment names in a 256-character column (as RunConfig's tracking)
    experiment: str | None = Field(None, min_length=1, max_length=256,
                                   description="default: the sweep name")
    uri: str | None = None

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, v):
        return v if v is None else check_plain_name(v, "experiment name")


class SweepFile(_Strict):
    # a directory name of Tune's storage (file names have at most 255 bytes) and the
    # default MLflow experiment name: 128 characters leave room for Tune's own suffixes
    name: str = Field(pattern=SWEEP_NAME_PATTERN, max_length=MAX_NAME)
    problem: dict[str, Any]
    algorithms: list[str | dict[str, Any]] = Field(min_length=1)
    algorithm: dict[str, Any] = {}
    search: Search = Search()
    seeds: list[int] = Field([0], min_length=1, max_length=MAX_SEEDS)
    rounds: int = Field(100, ge=1, le=MAX_ROUNDS)
    eval_every: int = Field(10, ge=1)
    divergence: float | None = RunConfig.model_fields["divergence"].default  # checked per trial
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
        unknown = [n for n in names if n not in ALGORITHMS]
        if unknown:  # named by the sweep's own key, `algorithms`
            problem = self.problem.get("name")
            scope = f"for problem {problem!r}" if problem in PROBLEMS else ""
            raise ValueError(f"algorithms: {unknown_name('algorithm', unknown[0], fitting_algorithms(problem), sorted(ALGORITHMS), scope)}")
        if any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be >= 0, got {self.seeds}")
        every = self.tune.checkpoint_every
        if every and every % self.eval_every:
            raise ValueError(f"tune.checkpoint_every must be a multiple of eval_every "
                             f"({self.eval_every}): checkpoints go with evaluated rounds; got {every}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct (a repeated seed repeats the same trial), "
                             f"got {self.seeds}")
        self._check_size(names)
        searched = {*self.search.grid, *self.search.random}
        for entry in [self.algorithm, *(a for a in self.algorithms if isinstance(a, dict))]:
            fixed = sorted(f"algorithm.{k}" for k in entry if f"algorithm.{k}" in searched)
            if fixed:
                raise ValueError(f"{fixed} both fixed (in {entry}) and searched: keep one")
        for key in [*self.algorithm, *(k.split(".", 1)[1] for k in searched
                                        if k.startswith("algorithm."))]:
            if not any(has_hyper(n, key) for n in names):
                allowed = sorted({k for n in names for k in ALGORITHMS[n].Hyper.model_fields} - {"name"})
                raise ValueError(f"unknown key 'algorithm.{key}': a hyperparameter of none of "
                                 f"{names}; allowed keys here: {allowed}")
        return self


    def _check_size(self, names: list[str]) -> None:
        """The configurations the sweep expands to, counted without expanding it."""
        grid, parts, total = self.search.grid, [], 0
        for name in names:
            count = len(self.seeds) * self.search.samples
            for key, values in grid.items():
                if not key.startswith("algorithm.") or has_hyper(name, key.split(".", 1)[1]):
                    count *= len(values)
            total += count
            parts.append(f"{name}: {count:,}")
        if total > MAX_CONFIGURATIONS:
            axes = " x ".join(f"{k} ({len(v)})" for k, v in grid.items()) or "no grid"
            raise ValueError(
                f"the sweep expands to {total:,} configurations ({', '.join(parts[:5])}"
                f"{', ...' if len(parts) > 5 else ''}: seeds ({len(self.seeds)}) x grid {axes} x "
                f"search.samples ({self.search.samples})); at most {MAX_CONFIGURATIONS:,} per "
                "sweep: search fewer values, or split it into several sweeps")


def has_hyper(algorithm: str, key: str) -> bool:
    """Whether `algorithm` declares the hyperparameter `key`."""
    return key in ALGORITHMS[algorithm].Hyper.model_fields


def _applies(algorithm: str, key: str) -> bool:
    """Whether the searched dotted key is a setting of trials of `algorithm`."""
    return not key.startswith("algorithm.") or has_hyper(algorithm, key.split(".", 1)[1])


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: the file's settings plus everything derived from them."""

    spec: SweepFile
    source: str  # the sweep as YAML (the file, or its resolved form after --set)
    #: validated run configs by point (`run_config`): each point is parsed once
    parsed: dict = field(default_factory=dict, compare=False, repr=False)
    #: the problems `load_sweep` built to check the trials, by `data_key` (those that fit
    #: KEEP_SHARE of the memory): the driver hands them to the trials (`run_sweep`), which
    #: build only the others
    problems: dict = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict:
        # pickled with Tune's experiment state (the logger, the resources function): never
        # the data; the trials get the problems through their own parameter
        return {**self.__dict__, "problems": {}}

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
        from ..tracking.store import default_uri  # MLflow: not for checking a sweep file

        return self.spec.tracking.uri or default_uri()

    def algorithms(self) -> dict[str, dict]:
        """Algorithm name -> its section (the shared hyperparameters it has, then its own)."""
        out = {}
        for entry in self.spec.algorithms:
            entry = {"name": entry} if isinstance(entry, str) else entry
            shared = {k: v for k, v in self.spec.algorithm.items() if has_hyper(entry["name"], k)}
            out[entry["name"]] = {**shared, **entry}
        return out

    def grid_points(self, random_values: bool = False):
        """Every trial's point without its random axes (with them at their extremes if
        `random_values`): per algorithm, seeds x the grid axes that apply to it."""
        for name in self.algorithms():
            axes = {"algorithm.name": [name], "seed": self.spec.seeds,
                    **{k: v for k, v in self.spec.search.grid.items() if _applies(name, k)}}
            if random_values:
                axes.update({k: d.extremes() for k, d in self.spec.search.random.items()
                             if _applies(name, k)})
            for values in itertools.product(*axes.values()):
                yield dict(zip(axes, values))

    def points(self):
        """Every grid point, with each random axis at each of its extreme values."""
        return self.grid_points(random_values=True)

    @property
    def fused(self) -> bool:
        """Whether trials are fused groups: asked for, and possible (ASHA stops
        configurations one by one: it runs unfused)."""
        settings = self.spec.tune
        return settings.fuse and settings.scheduler == "none"

    def drawn_points(self):
        """Every configuration of a fused sweep: the grid points, each crossed with
        `search.samples` draws of the random axes. The draws come from `search.seed`, one
        per (sample, algorithm) and shared by its seeds and grid points, so every rate drawn
        runs on every seed. (An unfused sweep leaves the drawing to Tune.)"""
        random = self.spec.search.random
        if not random:
            yield from self.grid_points()
            return
        rng = np.random.default_rng(self.spec.search.seed)
        draws = {(s, name): {k: d.draw(rng) for k, d in random.items() if _applies(name, k)}
                 for s in range(self.spec.search.samples) for name in self.algorithms()}
        for point in self.grid_points():
            for s in range(self.spec.search.samples):
                yield {**point, **draws[s, point["algorithm.name"]]}

    def groups(self) -> list[list[dict]]:
        """The Tune trials as groups of points: the configurations that `fco_ray.core.plan.groups`
        puts together (one fusable algorithm, differing only in real-valued hyperparameters and,
        where the problem allows it, `problem.lam`), at most `tune.fuse_max` each; every other
        point is a group of its own."""
        points = list(self.drawn_points() if self.fused else self.grid_points())
        if not self.fused:
            return [[p] for p in points]
        configs = [self.run_config(p) for p in points]
        return [[points[i] for i in members]
                for members in config_groups(configs, self.spec.tune.fuse_max)]

    def param_space(self) -> dict:
        """Tune's search space: one grid axis over the trials' groups of points (so that each
        algorithm has only its own axes, and fused configurations share a trial), plus the
        random axes of an unfused random search."""
        from ray import tune

        if self.fused:
            return {"group": tune.grid_search(self.groups())}
        space = {"point": tune.grid_search(list(self.grid_points()))}
        space.update({k: d.domain() for k, d in self.spec.search.random.items()})
        return space

    def members_of(self, tune_config: dict) -> list[dict]:
        """The points of a Tune trial (one, or a fused group's)."""
        if "group" in tune_config:
            return [dict(p) for p in tune_config["group"]]
        return [self.point_of(tune_config)]

    def point_of(self, tune_config: dict) -> dict:
        """An unfused trial's point from its Tune config (see `param_space`)."""
        if "point" not in tune_config:  # already a point
            return tune_config
        point = dict(tune_config["point"])
        point.update({k: tune_config[k] for k in self.spec.search.random
                      if _applies(point["algorithm.name"], k)})
        return point

    def num_trials(self) -> int:
        """Configurations (MLflow child runs) of the sweep."""
        return sum(1 for _ in self.grid_points()) * self.spec.search.samples

    def num_tune_trials(self) -> int:
        """Tune trials: configurations, or their fused groups."""
        return len(self.groups()) if self.fused else self.num_trials()

    def trial_config(self, point: dict) -> dict:
        """The run config of one trial (the `fco_ray.run` schema), as plain data."""
        spec = self.spec
        config = {"problem": copy.deepcopy(spec.problem),
                  "algorithm": dict(self.algorithms()[point["algorithm.name"]]),
                  "rounds": spec.rounds, "eval_every": spec.eval_every, "seed": point["seed"],
                  "divergence": spec.divergence,
                  "backend": copy.deepcopy(spec.backend)}
        for key, value in point.items():
            if key not in FIXED_POINT_KEYS:
                *parents, last = key.split(".")
                node = config
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = value
        return config

    def run_config(self, point: dict) -> RunConfig:
        """The validated run config of one configuration (parsed once per point)."""
        key = json.dumps(point, sort_keys=True, default=str)
        if key not in self.parsed:
            self.parsed[key] = parse_run(self.trial_config(point))
        return self.parsed[key]

    def checkpoint_every(self, rounds: int) -> int:
        """Rounds between a trial's checkpoints: `tune.checkpoint_every`, or the multiple of
        eval_every nearest a tenth of the trial's rounds (0: no checkpoints)."""
        every = self.spec.tune.checkpoint_every
        if every is not None:
            return every
        step = self.spec.eval_every
        return max(step, round(rounds / 10 / step) * step)

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
            cfg = sweep.run_config(point)
        except ConfigError as e:
            raise ConfigError(f"{path}: trial ({point_text(point)}): {e}") from None
        if cfg.backend.needs_gpu and not spec.tune.gpus_per_trial:
            raise ConfigError(f"{path}: tune.gpus_per_trial: trials with backend.device cuda need "
                              "a GPU share each (e.g. 0.25: four trials per GPU), got 0")
        # lam that weighs only psi changes no data, clients or metric names: checked once
        section = cfg.problem.model_dump(mode="json", exclude={"lam"} if cfg.problem.fusable_lam else None)
        by_problem.setdefault(json.dumps(section, sort_keys=True), []).append((point, cfg))
    room = None  # memory left for the problems kept for the trials (asked once, if needed)
    for trials in by_problem.values():
        problem = _check_against_problem(sweep, trials, path)
        size = sum((trials[0][1].problem.estimated_bytes() or {}).values())
        if size:
            if room is None:
                from ..runtime.limits import available_bytes

                room = KEEP_SHARE * available_bytes()
            if size > room:
                continue  # its trials build it
            room -= size
        sweep.problems[data_key(trials[0][1])] = problem
    _check_sweep_memory(sweep, [trials[0][1] for trials in by_problem.values()], path)
    _check_report(spec, path)
    return sweep


def _check_sweep_memory(sweep: Sweep, configs: list[RunConfig], path: Path,
                        available: int | None = None) -> None:
    """The trials that run at once on this machine must fit its memory together: each holds
    its problem (`ProblemParams.estimated_bytes`, checked alone when it is built), counted
    per trial also where they share one the driver kept (an upper bound). At
    once: `tune.max_concurrent`, else as many as this machine's CPUs allow (on a joined
    cluster, RAY_ADDRESS, trials spread over its nodes: not checked here)."""
    import os

    from ..runtime.limits import available_bytes, human

    settings = sweep.spec.tune
    if settings.max_concurrent is None and os.environ.get("RAY_ADDRESS", "").strip() not in ("", "local"):
        return
    estimates = [(sum(parts.values()), cfg) for cfg in configs
                 if (parts := cfg.problem.estimated_bytes())]
    if not estimates:
        return
    per_trial, cfg = max(estimates, key=lambda item: item[0])
    slots = settings.max_concurrent or max(1, int((os.cpu_count() or 1) // settings.cpus_per_trial))
    at_once = min(slots, sweep.num_tune_trials())
    available = available_bytes() if available is None else available
    if at_once > 1 and at_once * per_trial > available:
        fits = max(1, available // per_trial)
        raise ConfigError(f"{path}: {at_once} trials at once (tune.max_concurrent="
                          f"{settings.max_concurrent}, {os.cpu_count()} CPUs) need about "
                          f"{human(at_once * per_trial)} of memory, {human(per_trial)} each for problem "
                          f"{cfg.problem.name!r}, more than the {human(available)} available; set "
                          f"tune.max_concurrent to at most {fits}")


def _check_report(spec: SweepFile, path: Path) -> None:
    """The dashboard the end-of-sweep report will use must exist and be valid now, not
    after the whole sweep has run."""
    if spec.report is False:
        return
    if spec.report is not None and not isinstance(spec.report, (str, bool)):
        raise ConfigError(f"{path}: report: expected a dashboard name or path, or false (no "
                          f"report at the end of the sweep), got {short_repr(spec.report)}")
    from ..report.dashboard import find_dashboard

    try:
        find_dashboard(spec.report if isinstance(spec.report, str) else None, spec.problem.get("name"))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def point_text(point: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


def _check_against_problem(sweep: Sweep, trials: list, path: Path) -> Problem:
    """What only the problem's data can tell, for the trials sharing one problem section
    (built once, with the first trial's seed, and returned: `load_sweep` keeps it for the
    trials on its data): the data can be read (e.g. `problem.path` exists), each trial's
    clients_per_round fits its training clients, and the Tune metric is one that each
    algorithm reports (from the declared metric names: nothing is run)."""
    try:
        problem = build(trials[0][1])
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    names = problem.metric_names()
    for point, cfg in trials:
        try:
            check_problem([cfg], problem)
        except ConfigError as e:
            raise ConfigError(f"{path}: trial ({point_text(point)}): {e}") from None
        algorithm = ALGORITHMS[cfg.algorithm.name](cfg.algorithm)
        reported = {"round", "floats_up", "floats_down", *names,
                    *(f"{m}_{s}" for s in algorithm.extra_output_names() for m in names)}
        if sweep.metric not in reported:
            raise ConfigError(f"{path}: tune.metric: {sweep.metric!r} is not reported by "
                              f"{cfg.algorithm.name} on problem {cfg.problem.name!r}; "
                              f"allowed: {sorted(reported)}")
    return problem
