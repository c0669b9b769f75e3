"""The runtime sweep: a validated sweep file (`SweepFile`) and the trials it expands to.

`Sweep` is what the driver and every trial read: the points, their run configs (each parsed
once), the Tune trials as groups of points, the Tune search space, and the Tune metric and
mode of its reports (`final_report`). It is made and checked by `load_sweep` (checks.py).
"""
from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import dataclass, field

import numpy as np

from ..core.config import RunConfig, parse_run
from ..core.plan import groups as config_groups
from .schema import FIXED_POINT_KEYS, SweepFile, has_hyper


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

