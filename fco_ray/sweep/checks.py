"""The driver's load-time checks of a sweep: `load_sweep`, each step once, in order.

Every trial's config is validated here, once, with its problem's data read and sizes
checked, but no model is run and no optimum is solved. A bad file is answered before any
Ray, MLflow or pandas work (`ConfigError`, naming the file, key, value and what is allowed).
"""
from __future__ import annotations

from pathlib import Path

from ..algorithms import ALGORITHMS
from ..core.config import RunConfig
from ..core.plan import build, check_problem, data_key
from ..problems.base import Problem
from ..runtime.errors import ConfigError, short_repr
from .schema import SweepFile, read_sweep
from .sweep import Sweep

#: the problems the driver keeps for its trials take at most this share of the memory
#: available when the sweep is loaded (`ProblemParams.estimated_bytes`); the trials of
#: the others build their own
KEEP_SHARE = 0.25


def load_sweep(path: str | Path, overrides: list[str] = ()) -> Sweep:
    """Read, override (`key.path=value`), and validate a sweep file and all its trials.

    Raises `ConfigError` (naming the file, key, value and what is allowed) on any problem,
    before any Ray or Tune work. The steps, each once and in this order: the file and its
    own keys (`schema.read_sweep`); every trial's run config (`trial_configs`); the trials
    grouped by the problem they check against (`plan.data_key` without the seed), each
    problem built once, checked against its trials and kept for them where memory allows
    (`keep_problems`); the memory of the trials that run at once (`check_memory`); the
    dashboard of the end-of-sweep report (`check_report`). The tracking store is checked
    last, by `check_tracking` (`run_sweep`, after its `--resume` checks: it loads MLflow).
    """
    path = Path(path)
    spec, source = read_sweep(path, overrides)
    sweep = Sweep(spec, source)
    trials = trial_configs(sweep, path)
    by_problem: dict[str, list] = {}  # one problem section -> its trials (point, config)
    for point, cfg in trials:  # lam that weighs only psi changes no data: checked once
        by_problem.setdefault(data_key(cfg, seed=False), []).append((point, cfg))
    keep_problems(sweep, list(by_problem.values()), path)
    check_memory(sweep, [group[0][1] for group in by_problem.values()], path)
    check_report(spec, path)
    return sweep


def check_tracking(sweep: Sweep) -> None:
    """The sweep's tracking store can be used (`tracking.store.check_store`), before Ray
    starts and any trial runs."""
    from ..tracking.store import check_store  # MLflow: not for checking a sweep file

    check_store(sweep.tracking_uri)


def trial_configs(sweep: Sweep, path: Path) -> list[tuple[dict, RunConfig]]:
    """Every trial's point and validated run config (`Sweep.run_config`)."""
    trials = []
    for point in sweep.points():
        try:
            cfg = sweep.run_config(point)
        except ConfigError as e:
            raise ConfigError(f"{path}: trial ({point_text(point)}): {e}") from None
        if cfg.backend.needs_gpu and not sweep.spec.tune.gpus_per_trial:
            raise ConfigError(f"{path}: tune.gpus_per_trial: trials with backend.device cuda need "
                              "a GPU share each (e.g. 0.25: four trials per GPU), got 0")
        trials.append((point, cfg))
    return trials


def keep_problems(sweep: Sweep, by_problem: list[list], path: Path) -> None:
    """Each group's problem built once and checked against its trials (`check_against_problem`);
    kept in `sweep.problems` (by `data_key`) for the trials on its data while they fit
    KEEP_SHARE of the memory available (asked once, if needed)."""
    room = None  # memory left for the problems kept for the trials
    for trials in by_problem:
        problem = check_against_problem(sweep, trials, path)
        size = sum((trials[0][1].problem.estimated_bytes() or {}).values())
        if size:
            if room is None:
                from ..runtime.limits import available_bytes

                room = KEEP_SHARE * available_bytes()
            if size > room:
                continue  # its trials build it
            room -= size
        sweep.problems[data_key(trials[0][1])] = problem


def check_memory(sweep: Sweep, configs: list[RunConfig], path: Path,
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


def check_report(spec: SweepFile, path: Path) -> None:
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


def check_against_problem(sweep: Sweep, trials: list, path: Path) -> Problem:
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
