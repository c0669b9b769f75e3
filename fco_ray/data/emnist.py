"""Federated EMNIST in TensorFlow Federated's HDF5 layout, one client per writer.

TFF's `tff.simulation.datasets.emnist.load_data(only_digits=...)` downloads
`fed_emnist_digitsonly.tar.bz2` (10 classes, 3,383 writers) or `fed_emnist.tar.bz2`
(62 classes: digits, upper- and lower-case letters; 3,400 writers) and extracts

    <prefix>_train.h5, <prefix>_test.h5    with    examples/<client_id>/pixels  (n, 28, 28) float32 in [0, 1]
                                                   examples/<client_id>/label   (n,) integer class

The test file holds held-out examples of the same writers. Pixels are flattened to 784
features; labels are checked to lie in [0, classes).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..runtime.errors import ConfigError
from ..runtime.files import readable_file, reading
from ..runtime.limits import check_declared

PREFIX = {True: "fed_emnist_digitsonly", False: "fed_emnist"}
CLASSES = {True: 10, False: 62}
HDF5 = "an HDF5 file in TFF's federated EMNIST layout"
URL = "https://storage.googleapis.com/tff-datasets-public/{prefix}.tar.bz2"


@dataclass
class EmnistData:
    """Per-writer (x (n, 784) float32, y (n,) int64) for training and test, same writers."""

    train: list[tuple[np.ndarray, np.ndarray]]
    test: list[tuple[np.ndarray, np.ndarray]]
    client_ids: list[str]
    classes: int


def emnist_files(path: str | Path, only_digits: bool) -> tuple[Path, Path]:
    """(train, test) HDF5 files in directory `path` (or next to a given `*_train.h5` file)."""
    prefix = PREFIX[only_digits]
    path = Path(path).expanduser()
    folder = path.parent if path.is_file() else path
    train, test = folder / f"{prefix}_train.h5", folder / f"{prefix}_test.h5"
    missing = [str(p) for p in (train, test) if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"federated EMNIST (only_digits={only_digits}) needs {train.name} and {test.name} in "
            f"{folder}; missing: {missing}. To obtain them, on a machine with network access "
            f"download and extract {URL.format(prefix=prefix)} (or run TFF's "
            f"tff.simulation.datasets.emnist.load_data(only_digits={only_digits}), which caches "
            f"the extracted files under ~/.keras/datasets) and copy the two .h5 files here.")
    return train, test


def _read(file: Path, ids: list[str], classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import h5py

    out = []
    with reading(file, "EMNIST file", HDF5), h5py.File(file, "r") as f:
        examples = f["examples"]
        _check_declared_sizes(file, examples, ids)
        for cid in ids:
            if cid not in examples:
                out.append((np.zeros((0, 784), np.float32), np.zeros(0, np.int64)))
                continue
            pixels = np.asarray(examples[cid]["pixels"], dtype=np.float32)
            labels = np.asarray(examples[cid]["label"]).astype(np.int64).reshape(-1)
            if pixels.shape[1:] != (28, 28) or len(pixels) != len(labels):
                raise ConfigError(f"{file}: client {cid!r} has pixels {pixels.shape} and "
                                 f"{len(labels)} labels; expected (n, 28, 28) and n labels")
            if labels.size and (labels.min() < 0 or labels.max() >= classes):
                raise ConfigError(f"{file}: client {cid!r} has labels in [{labels.min()}, "
                                 f"{labels.max()}]; expected [0, {classes})")
            out.append((pixels.reshape(len(pixels), 784), labels))
    return out


def _check_declared_sizes(file: Path, examples, ids: list[str]) -> None:
    """The clients' arrays as their headers declare them (pixels read as float32, labels as
    int64) must fit in memory together, before any is read."""
    total, largest = 0, (0, "")
    for cid in ids:
        if cid not in examples:
            continue
        for name, itemsize in (("pixels", 4), ("label", 8)):
            shape = getattr(examples[cid].get(name), "shape", None) or ()
            size = math.prod(shape) * itemsize
            total += size
            largest = max(largest, (size, f"examples/{cid}/{name} of shape {shape}"))
    clients = f"{len(ids)} client" + ("s" if len(ids) != 1 else "")
    check_declared(file, "EMNIST file", total, f"the arrays of {clients} (the largest: {largest[1]})")


def load_emnist(path: str | Path, only_digits: bool = True, clients: int | None = None,
                seed: int = 0) -> EmnistData:
    """Writers of the TFF files under `path`: all of them, or `clients` drawn at random
    (keyed by `seed`) among those with training data, in sorted id order."""
    import h5py

    train_file, test_file = (readable_file(f, "EMNIST file") for f in emnist_files(path, only_digits))
    with reading(train_file, "EMNIST file", HDF5), h5py.File(train_file, "r") as f:
        if "examples" not in f:
            raise ConfigError(f"{train_file}: no 'examples' group (not TFF's federated EMNIST layout)")
        ids = sorted(cid for cid in f["examples"] if len(f["examples"][cid]["label"]) > 0)
    if clients is not None:
        if not 1 <= clients <= len(ids):
            raise ValueError(f"EMNIST clients must be in [1, {len(ids)}] (writers in {train_file.name}), got {clients}")
        pick = np.random.default_rng([seed, 0xE4]).choice(len(ids), size=clients, replace=False)
        ids = [ids[i] for i in np.sort(pick)]
    classes = CLASSES[only_digits]
    return EmnistData(_read(train_file, ids, classes), _read(test_file, ids, classes), ids, classes)
