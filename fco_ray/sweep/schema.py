"""What a sweep file may say: its pydantic models, and reading one (`read_sweep_file`).

A sweep file is a run config (`fco_ray.run`) plus `name`, `algorithms` (names, or mappings
of a name and its own fixed hyperparameters), `algorithm` (hyperparameters shared by the
algorithms that have them), `seeds`, `search` (grid and/or random axes over dotted config
keys) and `tune` settings. A trial is identified by its *point*, a flat dict
`{"algorithm.name": ..., "seed": ..., <searched dotted key>: value, ...}`.

Each algorithm declares its own hyperparameters, so an axis over `algorithm.X` applies only
to the algorithms that have X: a grid over `server_lr` does not repeat `gd` or
`centralized` trials (which have no server rate). The file's own keys are checked here;
the trials it expands to are the runtime `Sweep` (sweep.py), checked against their
problems by the driver (checks.py: `load_sweep`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..algorithms import ALGORITHMS
from ..core.checks import fitting_algorithms, unknown_name
from ..core.config import MAX_FUSE, MAX_ROUNDS, RunConfig, validate_model
from ..problems import PROBLEMS
from ..runtime.errors import ConfigError
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




def _validate_sweep(raw: dict, path: str | Path) -> SweepFile:
    try:
        return validate_model(SweepFile, raw, "")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def read_sweep_file(path: str | Path, overrides: list[str] = ()) -> SweepFile:
    """Read a sweep file, apply `key.path=value` overrides, validate its own keys."""
    return read_sweep(path, overrides)[0]


def read_sweep(path: str | Path, overrides: list[str] = ()) -> tuple[SweepFile, str]:
    """`read_sweep_file`, with the sweep as YAML: the file's text, or after overrides its
    resolved form (`Sweep.source`, logged with the sweep)."""
    raw = apply_overrides(load_yaml(path), list(overrides))
    spec = _validate_sweep(raw, path)
    return spec, yaml.safe_dump(raw, sort_keys=False) if overrides else Path(path).read_text()
