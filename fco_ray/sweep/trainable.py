"""The Tune side of one trial: its resources, its name, and the trainable that runs it.

A trial's configurations are validated once (`Sweep.run_config`) and prepared once
(`fco_ray.core.plan.prepare`: its problem checked) in the trial, on the problem the driver
built to check the sweep where the trial runs on that data (`problems`, from Ray's object
store: shared by the trials of a node, not copied), else built there. The trainable reports
every evaluated round with
`tune.report({...metrics, "round": r, "timesteps_total": r, "status": s})`; a diverged
trial ends with a last report whose metric is the worst value, so it ranks last.
A finished trial's last report carries a Tune checkpoint holding its artifacts
(`fco_ray.tracking.runs.write_artifacts`: the final model as `model.npz`, E6's attack as `attack.png`), which
the driver's MLflow logger attaches to the trial's run.

Checkpoints: every `Sweep.checkpoint_every` rounds a report also carries the run's state
(`tune.Checkpoint` of a directory with fco_ray.core.checkpoint's `state.npz`, a fused group's
stacked state included); a trial that Tune reruns after its process failed (killed, node
lost) gets it back from `tune.get_checkpoint` and continues from that round with the
numbers an uninterrupted run computes, after reporting again the results up to there
(kept in the checkpoint, marked `replayed`: the driver may have died before logging them;
the MLflow logger skips rounds it already has). Algorithms with state on the clients
(CoCoA+ duals) do not checkpoint and rerun from round 0.
"""
from __future__ import annotations

import logging
import tempfile
from dataclasses import replace
from pathlib import Path

import ray
from ray import tune

from ..algorithms import ALGORITHMS
from ..problems import PROBLEMS
from ..core.checkpoint import FILE as SNAPSHOT_FILE
from ..core.checkpoint import Snapshot, load_snapshot, save_snapshot
from ..core.config import BackendConfig
from ..core.plan import built_for, data_key, run_group
from ..tracking.runs import write_artifacts
from .schema import FIXED_POINT_KEYS
from .sweep import Sweep


def trial_bundles(backend: BackendConfig, cpus_per_trial: float = 1.0,
                  gpus_per_trial: float = 0.0) -> list[dict]:
    """Placement-group bundles a trial reserves: bundle 0 for the trial process (with its GPU
    share, where it runs the device path), then one per Ray client actor (which the ray
    backend places in bundles 1..n)."""
    return ([{"CPU": cpus_per_trial, **({"GPU": gpus_per_trial} if gpus_per_trial else {})}]
            + backend.actor_bundles())


class TrialResources:
    """Per-trial placement group, from the trial's own backend config (it may be searched)."""

    def __init__(self, sweep: Sweep):
        self.sweep = sweep

    def __call__(self, tune_config: dict):
        backend = self.sweep.run_config(self.sweep.members_of(tune_config)[0]).backend
        strategy = backend.placement_strategy
        return tune.PlacementGroupFactory(
            trial_bundles(backend, self.sweep.spec.tune.cpus_per_trial,
                          self.sweep.spec.tune.gpus_per_trial), strategy=strategy)


def member_key(trial_id: str, index: int) -> str:
    """The MLflow key (tag fco.trial_id) of configuration `index` of a trial."""
    return f"{trial_id}-{index}"


def registrations(sweep: Sweep) -> dict:
    """The user's own algorithm classes and problem builders that the sweep names (registered
    in the driver's process, not part of fco_ray): they travel with every trial, whose process
    registers them before it reads its configurations (`register_in_trial`)."""
    names = set(sweep.algorithms())
    algorithms = {n: ALGORITHMS[n] for n in names
                  if n in ALGORITHMS and not ALGORITHMS[n].__module__.startswith("fco_ray.")}
    problem = sweep.spec.problem.get("name")
    problems = {problem: PROBLEMS[problem]} if problem in PROBLEMS and \
        not PROBLEMS[problem].build.__module__.startswith("fco_ray.") else {}
    return {"algorithms": algorithms, "problems": problems}


def register_in_trial(registered: dict | None) -> None:
    """Register the driver's user classes (`registrations`) in this trial's process where
    its registries lack them."""
    for name, cls in (registered or {}).get("algorithms", {}).items():
        ALGORITHMS.setdefault(name, cls)
    for name, spec in (registered or {}).get("problems", {}).items():
        PROBLEMS.setdefault(name, spec)


def train_trial(tune_config: dict, sweep: Sweep, finished: dict, problems: dict | None = None,
                registered: dict | None = None) -> None:
    """The Tune trainable: a group of configurations (one or more; `fco_ray.core.plan.prepare`),
    reporting every evaluated round.

    Each report holds the rows of the group's configurations (`members`: [[index, row], ...], a
    list, which Tune's loggers keep as one value: its CSV logger fixes its columns at the first
    result), those that ended diverged (`ended`: indices), and as the Tune metric the best of
    the round's values (Tune ranks
    trials; the sweep's best configurations are ranked from MLflow, one run per configuration).
    The last report carries a checkpoint with each finished configuration's artifacts
    (`fco_ray.tracking.runs.write_artifacts`: `model.npz`, E6's `attack.png`; in folder `<index>/`), which the
    driver's MLflow logger attaches to the configuration's run.

    `finished`: configurations already FINISHED in MLflow before an interruption (by key):
    a resumed sweep reports them instead of running them again. `problems`: Ray object refs
    of the problems the driver built, by `data_key` (`Sweep.problems`), as its checks left
    them (they evaluated the initial model: a problem keeps no state between calls).
    `registered`: the user's algorithms and problems the sweep names (`registrations`)."""
    register_in_trial(registered)
    points = sweep.members_of(tune_config)
    trial_id, size = tune.get_context().get_trial_id(), len(points)
    done = [finished.get(member_key(trial_id, j)) for j in range(size)]
    if all(d is not None for d in done):
        rows = {j: {**d["metrics"], "round": d["round"]} for j, d in enumerate(done)
                if d["status"] == "finished"}
        status = "finished" if rows else "diverged"
        tune.report(_report(sweep, max(d["round"] for d in done), rows, [], status))
        return
    configs = [sweep.run_config(p) for p in points]
    stateless = not any(ALGORITHMS[c.algorithm.name].client_state for c in configs)
    start = _restored() if stateless else None  # a rerun continues from its checkpoint
    log = TrialLog(sweep, configs[0].rounds, start)
    ref = (problems or {}).get(data_key(configs[0]))
    built = None if ref is None else ray.get(ref)
    # the trial's configurations are one group, on the driver's problem where it has it
    run_group(configs, log, None if built is None else built_for(built, configs[0]), start=start,
              checkpoint_every=sweep.checkpoint_every(configs[0].rounds) if stateless else 0,
              on_checkpoint=log.hold)


class TrialLog:
    """A trial's reports to Tune as its group runs (`plan.run_group`'s log): every evaluated
    round (with a checkpoint of the run's state where one was taken at that round), then the
    last report, carrying the finished configurations' artifacts. `start`: the state of the
    checkpoint Tune reran the trial from (None: round 0); its results are reported again
    (marked `replayed`: the driver may have died before logging them; its logger skips
    rounds it has)."""

    def __init__(self, sweep: Sweep, rounds: int, start: Snapshot | None):
        self.sweep, self.rounds = sweep, rounds
        self.last_round = start.round if start else 0
        self.last_rows: dict | None = None  # the final round's rows: reported with the models
        self.ended: list[int] = []  # diverged configurations not yet reported
        self.reported = list(start.records) if start else []  # this trial's results so far
        self.pending: Snapshot | None = None  # the state of the round about to be reported
        for result in self.reported:  # again: the driver may have died before logging them
            tune.report({**result, "replayed": True})  # (its logger skips rounds it has)

    def begin(self, prepared) -> None:
        pass

    def hold(self, snapshot: Snapshot) -> None:
        """`on_checkpoint`: called just before that round's `on_round`."""
        self.pending = snapshot

    def on_round(self, rnd: int, rows: dict, diverged: list) -> None:
        self.ended.extend(diverged)
        snapshot, self.pending = self.pending, None
        if not rows:
            return  # only news of divergence: it goes with the next (or the last) report
        self.last_round = rnd
        if rnd == self.rounds:
            self.last_rows = rows  # reported in `finish`, with the models
            return
        result = _report(self.sweep, rnd, rows, self.ended, "running")
        self.ended.clear()
        self.reported.append(result)
        if snapshot is None or snapshot.round != rnd:
            tune.report(result)
            return
        with tempfile.TemporaryDirectory(prefix="fco-state-") as folder:
            save_snapshot(folder, replace(snapshot, records=self.reported))
            tune.report(result, checkpoint=tune.Checkpoint.from_directory(folder))  # copied

    def fail(self) -> None:
        pass  # Tune sees the error: it reruns the trial (tune.max_failures)

    def finish(self, prepared, results, models: dict[int, dict]) -> None:
        if not models or self.last_rows is None:  # every configuration diverged
            tune.report(_report(self.sweep, self.last_round, {}, list(range(len(results))),
                                "diverged"))
            return
        final = _report(self.sweep, self.rounds, self.last_rows, self.ended, "finished")
        # Ray logs "Checkpoint successfully created at ..." per trial to the driver's
        # terminal; the checkpoint is only the carrier of the artifacts to the driver
        logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
        with tempfile.TemporaryDirectory() as tmp:
            for j, model in models.items():
                folder = Path(tmp) / str(j)
                folder.mkdir()
                write_artifacts(prepared.configs[j], model, folder)
            tune.report(final, checkpoint=tune.Checkpoint.from_directory(tmp))


def _restored() -> Snapshot | None:
    """The state of this trial's last checkpoint, if Tune is rerunning it (None: round 0)."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        if not (Path(folder) / SNAPSHOT_FILE).is_file():
            return None  # the final checkpoint (a finished trial's artifacts): run it again
        return load_snapshot(folder)


def _report(sweep: Sweep, rnd: int, rows: dict, ended: list, status: str) -> dict:
    """A Tune result of a trial's group (see `train_trial`)."""
    values = [r[sweep.metric] for r in rows.values() if sweep.metric in r]
    best = (max if sweep.mode == "max" else min)(values) if values else None
    report = sweep.final_report({}, rnd, "diverged") if best is None else {sweep.metric: best}
    return {**report, "round": rnd, "timesteps_total": rnd, "status": status,
            # lists, which Tune's loggers keep as one value each (a dict would become a column
            # per member and metric, changing as members end): [[member, row], ...]
            "members": [[j, _plain(r)] for j, r in rows.items()], "ended": list(ended)}


def _plain(row: dict) -> dict:
    """A row's NumPy scalars as the Python numbers they hold (Tune's files show them so)."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}


def trial_name(trial) -> str:
    """Readable trial names: algorithm, searched values, seed (e.g. fedmid_client_lr=0.001_seed0);
    a fused group: its first configuration and the group size (fedmid_client_lr=0.001_seed0+34)."""
    points = trial.config.get("group") or [trial.config.get("point", trial.config)]
    point = {**points[0], **{k: v for k, v in trial.config.items() if k not in ("point", "group")}}
    values = [f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
              for k, v in point.items() if k not in FIXED_POINT_KEYS]
    more = [f"+{len(points) - 1}"] if len(points) > 1 else []
    return "_".join([point["algorithm.name"], *values, f"seed{point['seed']}"]) + "".join(more)


def trial_dirname(trial) -> str:
    return trial.trial_id
