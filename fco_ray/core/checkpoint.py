"""A run's state at a round, saved as plain arrays and restored without pickles.

The engine's state after round r (the algorithm's server state plus the last round's
communication counts) determines every later round: clients, minibatches and noise are
drawn from counter-based keys of (seed, round, ...) (fco_ray.ops.random), never from a
generator that advances. So a run restored from a snapshot at round r continues with
exactly the numbers an uninterrupted run computes (tests/engine/test_checkpoint.py).

Format: one `state.npz` (np.savez) holding each leaf of the (possibly nested) state dict
under its "/"-joined key path, plus `__kinds__`, a JSON text naming each leaf's Python kind
(array, float, int, bool) so scalars come back as the same types, and which nodes are
fco_ray dataclasses (e.g. the FISTA state of `centralized`; rebuilt from their fields,
only classes of this package), and `__records__`, the metric rows so far as JSON text. Read with `allow_pickle=False`: a file holding objects is
refused, never unpickled.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..runtime.limits import check_declared
from ..runtime.files import replacing

FILE = "state.npz"
_KINDS = "__kinds__"
_RECORDS = "__records__"


@dataclass
class Snapshot:
    round: int  # rounds done
    state: dict  # the algorithm's server state after `round` rounds
    comm: dict = field(default_factory=dict)  # floats_up / floats_down of the last round
    #: metric rows reported up to `round` (a sweep trial re-reports them when restored, so
    #: that rows its logger had not written before the failure are not lost)
    records: list[dict] = field(default_factory=list)
    #: the divergence bounds set from round 0's train_loss (one per configuration)
    loss_limits: list[float] = field(default_factory=lambda: [math.inf])
    #: a fused group (fco_ray.core.group): the configurations still running, whose stacked
    #: state `state` is; None for a single run
    active: list[int] | None = None


def _flatten(tree: dict, prefix: str = "", classes: dict | None = None) -> dict:
    """Leaves by "/"-joined key path; dataclass nodes (e.g. a FISTA state) are recorded in
    `classes` by path and flattened like dicts."""
    out = {}
    for key, value in tree.items():
        if not isinstance(key, str) or "/" in key or key in (_KINDS, _RECORDS):
            raise ValueError(f"state key {key!r}: checkpoints need string keys without '/'")
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = type(value)
            if not cls.__module__.startswith("fco_ray."):
                raise ValueError(f"state key {key!r}: only fco_ray's own dataclasses can be "
                                 f"checkpointed, got {cls.__module__}.{cls.__qualname__}")
            classes[prefix + key] = f"{cls.__module__}:{cls.__qualname__}"
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}/", classes))
        else:
            out[prefix + key] = value
    return out


def _dataclass(name: str):
    """A dataclass of fco_ray named in a checkpoint (never anything outside the package)."""
    module, qualname = name.split(":")
    if not module.startswith("fco_ray."):
        raise ValueError(f"checkpoint names class {name!r} outside fco_ray")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not dataclasses.is_dataclass(cls):
        raise ValueError(f"checkpoint names {name!r}, which is not a dataclass of fco_ray")
    return cls


def _kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, np.ndarray) or np.isscalar(value):
        if np.asarray(value).dtype == object:
            raise ValueError("object arrays cannot be checkpointed")
        return "array"
    raise ValueError(f"a state leaf of type {type(value).__name__} cannot be checkpointed")


def save_snapshot(folder: str | Path, snapshot: Snapshot) -> Path:
    """Write `snapshot` into `folder/state.npz`."""
    classes: dict[str, str] = {}
    leaves = _flatten({"state": snapshot.state, "comm": snapshot.comm}, "", classes)
    kinds = {k: _kind(v) for k, v in leaves.items()}
    meta = {"round": snapshot.round, "kinds": kinds, "classes": classes,
            "loss_limits": [float(v) for v in snapshot.loss_limits],  # JSON: inf as Infinity
            "active": snapshot.active}
    path = Path(folder) / FILE
    records = json.dumps(snapshot.records, default=float)  # floats, NaN / Infinity included
    with replacing(path) as temp:
        np.savez(temp, **{k: np.asarray(v) for k, v in leaves.items()},
                 **{_KINDS: np.array(json.dumps(meta)), _RECORDS: np.array(records)})
    return path


def check_npz_sizes(path: Path, what: str) -> None:
    """ConfigError naming `path` if the arrays its members' .npy headers declare would not
    fit in memory together (`limits.check_declared`): np.load would try to allocate them."""
    import zipfile

    total, largest, count = 0, (0, ""), 0
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return  # np.load says what is wrong with it
    with archive:
        for member in archive.namelist():
            if not member.endswith(".npy"):
                continue
            with archive.open(member) as f:
                fmt = np.lib.format
                version = fmt.read_magic(f)
                read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
                if read is None:
                    continue  # np.load says what is wrong with it
                shape, _, dtype = read(f)
            size = math.prod(shape) * dtype.itemsize
            total, count = total + size, count + 1
            largest = max(largest, (size, f"{member} of shape {shape} ({dtype})"))
    check_declared(path, what, total, f"{count} array{'s' if count != 1 else ''} (the largest: "
                   f"{largest[1]})")


def load_snapshot(folder: str | Path) -> Snapshot:
    """The snapshot in `folder/state.npz` (no pickles: object arrays are refused; arrays whose
    headers declare more than the memory available are refused before any is read)."""
    check_npz_sizes(Path(folder) / FILE, "checkpoint")
    with np.load(Path(folder) / FILE, allow_pickle=False) as data:
        meta = json.loads(str(data[_KINDS]))
        tree: dict = {}
        for key, kind in meta["kinds"].items():
            value = data[key]
            value = {"bool": bool, "int": int, "float": float}[kind](value) if kind != "array" else value.copy()
            *parents, last = key.split("/")
            node = tree
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        for path in sorted(meta.get("classes", {}), key=lambda p: -p.count("/")):  # innermost first
            *parents, last = path.split("/")
            node = tree
            for part in parents:
                node = node[part]
            node[last] = _dataclass(meta["classes"][path])(**node[last])
        records = json.loads(str(data[_RECORDS])) if _RECORDS in data.files else []
    return Snapshot(int(meta["round"]), tree.get("state", {}), tree.get("comm", {}), records,
                    [float(v) for v in meta["loss_limits"]], meta["active"])
