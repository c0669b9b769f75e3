"""One preparation step: validated configurations -> groups ready to run.

`prepare(configs)` is where every entry (the CLI's `run`, `fco_ray.run`, a sweep's trial)
turns one group of configurations into work: it builds the group's problem once and runs the
checks that need the problem's data (clients per round against the training clients; an
algorithm against a custom problem's kinds). Which configurations form a group is the one
rule of `groups` (`group_key`), asked by those that group (`run_grid` through
`prepare_groups`, a sweep's driver). Configurations are parsed before they get here, once.
"""
from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Protocol

import numpy as np

from ..algorithms import ALGORITHMS
from ..algorithms.base import Algorithm, is_real
from ..backends import make_backend
from ..problems import PROBLEMS, build_problem
from ..problems.base import Problem
from ..runtime.errors import ConfigError
from .checks import check_clients, check_fits
from .config import RunConfig
from .engine import OnRound, RunResult, run_rounds
from .group import Group, fuse_key, make_group

#: configurations per fused group at most on the NumPy engine: bounds the stacked state and
#: client rows (memory grows with the group size)
MAX_GROUP = 64
#: ... and on a backend that compiles whole rounds (a device): E5's 35 rate pairs x 10 seeds
#: form one group; the backend refuses a group that does not fit its memory, naming it
MAX_DEVICE_GROUP = 1024


def group_bound(cfg: RunConfig) -> int:
    """The default size bound of groups of configurations like `cfg`."""
    return MAX_DEVICE_GROUP if cfg.backend.compiles_rounds else MAX_GROUP


def fusable(algorithm: type[Algorithm], problem_params: type, key: str) -> bool:
    """Whether the dotted config key `key` may differ inside a group of `algorithm` (a class)
    on a problem with parameter model `problem_params`: a real-valued hyperparameter of a
    fusable algorithm, or `problem.lam` where the problem's lam weighs psi alone
    (`ProblemParams.fusable_lam`) and the algorithm's clients take the stacked steps. The one
    rule of which configurations fuse (run_grid's groups, a sweep's trials)."""
    if not algorithm.fusable:
        return False
    if key == "problem.lam":
        return problem_params.fusable_lam and not algorithm.serves_group
    field = algorithm.Hyper.model_fields.get(key.split(".", 1)[1]) if key.startswith("algorithm.") else None
    return field is not None and is_real(field)


def lam_fuses(cfg: RunConfig) -> bool:
    """Whether configurations like `cfg` may differ in `problem.lam` inside a group."""
    return fusable(ALGORITHMS[cfg.algorithm.name], PROBLEMS[cfg.problem.name].params, "problem.lam")


def seeds_fuse(cfg: RunConfig) -> bool:
    """Whether configurations like `cfg` may differ in `seed` inside a group: the data does
    not depend on the seed (`problem.data_seed` fixed) and the backend draws each member's
    own randomness (`compiles_rounds`: the device backend, whose rules are per member)."""
    return (getattr(cfg.problem, "data_seed", None) is not None and cfg.backend.compiles_rounds
            and ALGORITHMS[cfg.algorithm.name].fusable)


def group_key(cfg: RunConfig) -> str:
    """Configurations with the same key run as one group: the same problem (but for a lam
    that weighs psi alone), seed (but where seeds fuse), backend and every non-real-valued
    setting of one fusable algorithm. The one grouping rule (run_grid, sweeps)."""
    shared = cfg.model_dump(mode="json", exclude={"algorithm", "tracking"})
    if lam_fuses(cfg):
        del shared["problem"]["lam"]
    if seeds_fuse(cfg):
        del shared["seed"]
    return json.dumps([shared, cfg.algorithm.name, fuse_key(cfg.algorithm)], sort_keys=True)


def groups(configs: list[RunConfig], max_group: int | None = None, fuse: bool = True) -> list[list[int]]:
    """Indices of `configs` in groups (of at most `max_group`; None: `group_bound`), first-seen
    order; a configuration of an algorithm that cannot fuse (or with `fuse=False`) is alone."""
    by_key: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        alone = not (fuse and ALGORITHMS[cfg.algorithm.name].fusable)
        by_key.setdefault(f"alone {i}" if alone else group_key(cfg), []).append(i)
    out = []
    for members in by_key.values():
        bound = max_group or group_bound(configs[members[0]])
        out += [members[s:s + bound] for s in range(0, len(members), bound)]
    return out


@dataclass
class Prepared:
    """One group's configurations with what they run on: the problem, built once and checked
    against every member, and the group of algorithms."""

    configs: list[RunConfig]
    problem: Problem
    lams: list[float] | None = None
    #: one seed per configuration where they differ (a group fused over seeds)
    seeds: list[int] | None = None
    algorithms: list = field(init=False)

    def __post_init__(self):
        if len(self.configs) > 1 and len({group_key(c) for c in self.configs}) > 1:
            raise ValueError("configurations prepared together must form one group "
                             "(plan.groups); these do not")
        self.algorithms = [ALGORITHMS[c.algorithm.name](c.algorithm) for c in self.configs]

    @property
    def first(self) -> RunConfig:
        return self.configs[0]

    @cached_property
    def backend(self):
        """The backend settings this group runs with (`device: auto` decided for its pair,
        size and rounds, once: fco_ray/backends/choice.py)."""
        cfg = self.first
        return cfg.backend.for_work(cfg.problem.name, cfg.algorithm.name, group=len(self.configs),
                                    rounds=cfg.rounds, eval_every=cfg.eval_every,
                                    work=round_work(cfg, self.problem),
                                    rules=self.algorithms[0].has_rule() and self.problem.has_rule())

    def group(self) -> Group:
        return make_group(self.algorithms, self.lams, self.seeds)

    def run(self, on_round: OnRound | None = None, **checkpoints) -> list[RunResult]:
        """Run the group on its backend: one RunResult per configuration (`engine.run_rounds`;
        `checkpoints`: `start`, `checkpoint_every`, `on_checkpoint`)."""
        cfg = self.first
        with closing(make_backend(self.backend, self.problem)) as backend:
            return run_rounds(self.problem, self.group(), backend, rounds=cfg.rounds,
                              eval_every=cfg.eval_every, seed=cfg.seed, divergence=cfg.divergence,
                              on_round=on_round, **checkpoints)

    def model(self, index: int, result: RunResult) -> dict | None:
        """Configuration `index`'s final output model as plain arrays (None if it diverged)."""
        if result.status != "finished" or result.state is None:
            return None
        algorithm = self.algorithms[index]
        return {k: np.array(v, copy=True)
                for k, v in algorithm.output(self.member_problem(index), result.state).items()}

    def member_problem(self, index: int) -> Problem:
        """Configuration `index`'s own problem: the group's, with the member's own lam where
        the members differ in lam (the group's problem carries the first member's)."""
        return self.problem if self.lams is None else self.problem.with_lam(self.lams[index])


def round_work(cfg: RunConfig, problem: Problem) -> int:
    """A round's work for one configuration, in the engine choice's unit: model floats x
    clients per round x local steps (fco_ray/backends/choice.py)."""
    floats = sum(int(np.prod(s)) for s in problem.shapes.values())
    clients = getattr(cfg.algorithm, "clients_per_round", None) or problem.num_clients
    return floats * clients * (getattr(cfg.algorithm, "local_steps", None) or 1)


def data_key(cfg: RunConfig, seed: bool = True) -> str:
    """Configurations with equal keys run on the same data: equal problem sections (lam
    aside where it weighs psi alone, `ProblemParams.fusable_lam`) and the same data seed
    (`problem.data_seed` where set, else the run's seed: what `build_problem` builds
    from). A problem built for one of them serves every other through `built_for`.
    `seed=False`: the problem section alone, the same data up to its seed (what a check of
    the data asks: a sweep's driver checks the trials of one such key on one build)."""
    section = cfg.problem.model_dump(mode="json", exclude={"lam"} if cfg.problem.fusable_lam else None)
    if not seed:
        return json.dumps(section, sort_keys=True)
    data_seed = cfg.seed if getattr(cfg.problem, "data_seed", None) is None else cfg.problem.data_seed
    return json.dumps([section, data_seed], sort_keys=True)


def built_for(problem: Problem, cfg: RunConfig) -> Problem:
    """`problem`, built for a configuration of `cfg`'s `data_key`, as `cfg`'s own: the same
    data (shared), `cfg`'s lam."""
    return problem.with_lam(cfg.problem.lam) if cfg.problem.fusable_lam else problem


def build(cfg: RunConfig) -> Problem:
    """The problem of `cfg` (its data read or generated), errors as ConfigError."""
    try:
        return build_problem(cfg.problem, cfg.seed)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_problem(configs: list[RunConfig], problem: Problem) -> None:
    """The checks that need a built problem, for every configuration that runs on it (also a
    sweep's validation on its driver)."""
    for cfg in configs:
        if cfg.problem.name == "custom":  # a custom instance: its own kinds decide what fits
            check_fits(cfg.algorithm.name, problem.kinds, problem.name)
        check_clients(cfg.algorithm.clients_per_round, problem.num_clients, problem.name)


def prepare(configs: list[RunConfig], problem: Problem | None = None) -> Prepared:
    """One group of `configs` (one configuration, or the members of one `groups` entry)
    ready to run: its problem built (or `problem`, an instance every member runs on: a
    custom one, or one built for an earlier group of the same problem) and checked against
    every member. Where it runs is checked when `Prepared.run` makes the backend
    (`backends.make_backend`: a ray backend's actors against the local cluster, a device),
    before any row or MLflow run; a sweep's driver checks its cluster's resources itself."""
    first = configs[0]
    check_device_plan(configs)
    on = build(first) if problem is None else problem
    lams = [c.problem.lam for c in configs] if lam_fuses(first) else []
    seeds = [c.seed for c in configs]
    check_problem(configs, on)
    return Prepared(configs, on, lams if len(set(lams)) > 1 else None,
                    seeds if len(set(seeds)) > 1 else None)


class GroupLog(Protocol):
    """What `run_group` tells as a group runs: `fco_ray.run`'s observers of its one
    configuration (`api.run_parsed`), a sweep trial's reports to Tune
    (`sweep.trainable.TrialLog`)."""

    #: called at every evaluated round (`engine.OnRound`); None: no rows wanted
    on_round: OnRound | None

    def begin(self, prepared: Prepared) -> None:
        """The group is prepared (its data read and checked): about to run."""

    def fail(self) -> None:
        """The run raised (the exception goes on)."""

    def finish(self, prepared: Prepared, results: list[RunResult], models: dict[int, dict]) -> None:
        """The run ended: one result per configuration, and the final model of each that
        finished (by index; `Prepared.model`), whose artifacts the log keeps."""


def run_group(configs: list[RunConfig], log: GroupLog, problem: Problem | None = None,
              **checkpoints) -> tuple[Prepared, list[RunResult], dict[int, dict]]:
    """One group's run, logged: `prepare` (the data read and checked before the log begins),
    the rounds with `log.on_round` (`checkpoints`: `start`, `checkpoint_every`,
    `on_checkpoint` of `engine.run_rounds`), each finished member's model, and `log.finish`
    with them (its artifacts); `log.fail` where the run raises. The one sequence of
    `fco_ray.run` and a sweep's trial."""
    prepared = prepare(configs, problem)
    log.begin(prepared)
    try:
        results = prepared.run(log.on_round, **checkpoints)
    except BaseException:
        log.fail()
        raise
    models = {j: model for j, result in enumerate(results)
              if (model := prepared.model(j, result)) is not None}
    log.finish(prepared, results, models)
    return prepared, results, models


def prepare_groups(configs: list[RunConfig], *, problem: Problem | None = None, fuse: bool = True,
                   max_group: int | None = None) -> list[Prepared]:
    """The `groups` of `configs`, each `prepare`d, in first-seen order; consecutive groups on
    the same data (`data_key`) share one built problem. `problem`: a custom instance that
    every configuration runs on instead of building its problem section."""
    out: list[Prepared] = []
    built: tuple[str, Problem] | None = None
    planned = groups(configs, max_group, fuse)
    for members in planned:  # what can be refused from the configs alone, before any build
        check_device_plan([configs[i] for i in members])
    for members in planned:
        chosen = [configs[i] for i in members]
        on = problem
        if on is None:
            key = data_key(chosen[0])
            if built is None or built[0] != key:
                built = (key, build(chosen[0]))
            on = built_for(built[1], chosen[0])
        out.append(prepare(chosen, on))
    return out


def check_device_plan(configs: list[RunConfig]) -> None:
    """For a group asking a JAX device (`backend.device` jax-cpu or cuda), refuse from the
    configs alone -- before the problem is built and JAX loads -- what cannot run: an
    environment that stops JAX (`device.environment.jax_trouble`), and on jax-cpu a group
    whose device memory, estimated from the config (the data's estimate, and per member and
    client the live copies of a local step over at least `problem.dim` model floats:
    `device.memory.estimate_bytes`), exceeds the memory available. Before, 1,024 members at
    dim 100,000 were refused by the backend after 32 s of building the problem and loading
    JAX. The backend checks again with the built problem's shapes."""
    first = configs[0]
    device = getattr(first.backend, "device", None)
    if device not in ("jax-cpu", "cuda"):
        return
    from ..backends.device.environment import _jax, jax_trouble
    from ..backends.device.memory import estimate_bytes, refuse_over
    from ..runtime.limits import available_bytes

    if jax_trouble(device) is not None:
        _jax(device)  # the ConfigError naming backend.device, the device and the cause
    if device != "jax-cpu" or first.problem.name == "custom":
        return  # a GPU's free memory is known only from JAX; a custom problem's shapes only built
    params = first.problem
    dim = getattr(params, "dim", None)
    clients = getattr(first.algorithm, "clients_per_round", None) or getattr(params, "clients", None)
    if not isinstance(dim, int) or not isinstance(clients, int):
        return
    data = max((params.estimated_bytes() or {"": 0}).values())
    refuse_over(estimate_bytes(data, dim, dim, len(configs), clients), available_bytes(),
                f"backend.device 'jax-cpu': a group of {len(configs)} configurations of "
                f"{first.algorithm.name!r} on {params.name!r} (problem.dim={dim}, {clients} clients "
                "per round) needs at least", "of memory",
                "Run smaller groups (run_grid max_group, tune.fuse_max) or fewer clients per round",
                left="available")


def rows_callback(on_eval: Callable[[dict], None] | None) -> OnRound | None:
    """An `on_round` that hands each member's row to `on_eval` (a single run's view)."""
    if on_eval is None:
        return None
    return lambda rnd, rows, ended: [on_eval(row) for row in rows.values()]
