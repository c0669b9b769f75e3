"""The datasets of the classification problems (`problem.dataset` of `sparse_logreg`,
`constrained_logreg` and `mlp`): one object per name in `DATASETS`, each carrying its own
facts, so that the problems never ask a dataset's name.

A dataset says
- how it loads: `load(p, seed, binary)` -> (training clients, validation clients or None,
  info), from the problem's parameters `p`; `binary` asks for labels in {0, 1}
  (`sparse_logreg`), else all of its classes. `info` always holds `dataset` and `classes`
  (the number of label values), plus what the dataset knows besides (e.g. a true map);
- its memory estimate: `estimated_bytes(p)` (read before loading, `fco_ray.runtime.limits`);
- its model dimensions: `features_classes(p)` (features, classes) of the multinomial
  problems, known before loading;
- the problem keys it owns (`own_keys`: an error with any other dataset) and the shared keys
  it refuses (`unset_keys`, with the reason); `check(p)` for its own constraints;
- whether its features are `standardized` (z-scored with the training split's statistics).

The loaders of the local copies and the generator stay in their modules (`haxby`, `emnist`,
`synthetic_fmri`); the scikit-learn datasets load here.
"""
from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np

from .partition import dirichlet_label_split
from .stores import ClientData

DEFAULT_CLIENTS = 20  # clients of the shipped (scikit-learn) datasets and of synthetic_fmri
Loaded = tuple[ClientData, "ClientData | None", dict[str, Any]]


def clients_from_pairs(pairs) -> ClientData:
    """ClientData with arrays `x`, `y` from per-client (x, y) pairs; empty clients dropped."""
    return ClientData.from_lists([{"x": x, "y": y} for x, y in pairs if len(y)])


def split_pooled(x: np.ndarray, y: np.ndarray, clients: int, alpha: float, seed: int,
                 test_fraction: float, standardize: bool = False):
    """A random test split (one validation client) and a Dirichlet(alpha) label-skewed split
    of the rest over `clients`. With `standardize`, features are z-scored with the training
    split's statistics. Returns (train, test or None)."""
    rng = np.random.default_rng([seed, 0xC1A5])
    order = rng.permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    if standardize:
        mean, std = x[train].mean(axis=0), x[train].std(axis=0)
        x = (x - mean) / np.where(std > 0, std, 1.0)
    parts = dirichlet_label_split(y[train], clients, alpha, rng)
    train_data = clients_from_pairs([(x[train][p], y[train][p]) for p in parts])
    return train_data, (clients_from_pairs([(x[test], y[test])]) if n_test else None)


def local_copy(load, *args):
    """`load(*args)` of a local copy, a missing file reported as a bad `problem.path`."""
    try:
        return load(*args)
    except FileNotFoundError as e:
        raise ValueError(f"problem.path: {e}") from None


class Dataset(abc.ABC):
    """One value of `problem.dataset` (the module docstring says what each part is)."""

    name: ClassVar[str]
    own_keys: ClassVar[tuple[str, ...]] = ()
    unset_keys: ClassVar[dict[str, str]] = {}
    standardized: ClassVar[bool] = False

    @abc.abstractmethod
    def load(self, p, seed: int, binary: bool) -> Loaded: ...

    @abc.abstractmethod
    def estimated_bytes(self, p) -> dict[str, int]: ...

    def features_classes(self, p) -> tuple[int, int]:
        """(features, classes) of the multinomial problems' model (constrained_logreg, mlp):
        only the datasets those problems accept (their `dataset` Literal) say it; the
        binary-only ones (breast_cancer, haxby) are refused here by name."""
        raise ValueError(f"dataset {self.name!r} serves the binary problem "
                         "(sparse_logreg) only: it has no (features, classes)")

    def check(self, p) -> None:
        """Raise ValueError where `p` breaks a constraint of this dataset's own keys."""


class Shipped(Dataset):
    """A scikit-learn dataset: a random `test_fraction` test split, the rest split over
    `clients` (default DEFAULT_CLIENTS) by Dirichlet(`alpha`) label skew."""

    size: ClassVar[tuple[int, int]]  # (samples, features)
    classes: ClassVar[int]

    @abc.abstractmethod
    def arrays(self, p, binary: bool) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) before the split."""

    def load(self, p, seed, binary):
        x, y = self.arrays(p, binary)
        train, val = split_pooled(x, y, p.clients or DEFAULT_CLIENTS, p.alpha, seed, p.test_fraction,
                                  standardize=self.standardized)
        return train, val, {"dataset": self.name, "classes": 2 if binary else self.classes}

    def estimated_bytes(self, p):
        n, d = self.size
        return {f"the {self.name} data ({n:,} x {d} floats, twice)": 2 * 8 * n * d}

    def features_classes(self, p):
        return self.size[1], self.classes


class Digits(Shipped):
    """8x8 pixels scaled to [0, 1]; binary: only the two digits `classes` = (negative,
    positive), y = 1 for the positive one."""

    name, size, classes = "digits", (1797, 64), 10

    def arrays(self, p, binary):
        from sklearn import datasets

        x, y = datasets.load_digits(return_X_y=True)
        x = x / 16.0
        if binary:
            keep = np.isin(y, p.classes)
            x, y = x[keep], (y[keep] == p.classes[1]).astype(np.int64)
        return x, y


class BreastCancer(Shipped):
    """Binary (y = 1 benign), features standardized with the training split's statistics."""

    name, size, classes, standardized = "breast_cancer", (569, 30), 2, True

    def arrays(self, p, binary):
        from sklearn import datasets

        return datasets.load_breast_cancer(return_X_y=True)


class Haxby(Dataset):
    """A local copy of Haxby 2001 (`fco_ray.data.haxby`), binary: one client per session."""

    name = "haxby"
    unset_keys = {"clients": "one client per session"}

    def load(self, p, seed, binary):
        from .haxby import load_haxby

        data = local_copy(load_haxby, p.path, p.train_subjects, p.val_subjects, p.mask, p.standardize)
        return (clients_from_pairs(data.train), clients_from_pairs(data.val) if data.val else None,
                {"dataset": self.name, "classes": 2, "sessions_train": data.sessions_train,
                 "sessions_val": data.sessions_val})

    def estimated_bytes(self, p):  # one subject's 4-D BOLD series at a time, float32
        return {"one Haxby subject's BOLD series (40 x 64 x 64 x 1,452 float32)": 4 * 40 * 64 * 64 * 1452}


class Emnist(Dataset):
    """A local copy of TFF's federated EMNIST (`fco_ray.data.emnist`), multinomial: one client
    per writer (`clients` of them, default all), validation = the same writers' test examples."""

    name = "emnist"
    SIZES: ClassVar[dict[bool, tuple[int, int]]] = {  # only_digits: (writers, examples), TFF's counts
        True: (3383, 341_873 + 40_832), False: (3400, 671_585 + 77_483)}

    def load(self, p, seed, binary):
        from .emnist import load_emnist

        data = local_copy(load_emnist, p.path, p.only_digits, p.clients, seed)
        test = [pair for pair in data.test if len(pair[1])]
        return (clients_from_pairs(data.train), clients_from_pairs(test) if test else None,
                {"dataset": self.name, "classes": data.classes, "client_ids": data.client_ids})

    def estimated_bytes(self, p):  # float32 pixels, read once and copied into client arrays
        writers, examples = self.SIZES[p.only_digits]
        share = min(p.clients or writers, writers) / writers
        return {f"the EMNIST examples ({examples:,} x 784 float32, twice; x problem.clients"
                f"={p.clients} / {writers:,} writers)": int(2 * 4 * 784 * examples * share)}

    def features_classes(self, p):
        from .emnist import CLASSES

        return 784, CLASSES[p.only_digits]


class SyntheticFmri(Dataset):
    """The generated stand-in (`fco_ray.data.synthetic_fmri`): binary, or `conditions`
    classes; info adds the truth `w_true` and `bayes_accuracy`."""

    name = "synthetic_fmri"
    #: the generator's arguments, problem keys of the same names
    GENERATOR_KEYS: ClassVar[tuple[str, ...]] = (
        "grid", "support", "blobs", "smoothness", "noise_smoothness", "subject_shift", "signal",
        "val_clients", "subjects_per_client", "scans_per_subject")
    own_keys = (*GENERATOR_KEYS, "conditions")

    @staticmethod
    def conditions(p, binary: bool) -> int:
        return 2 if binary else p.conditions

    def load(self, p, seed, binary):
        from .synthetic_fmri import make_synthetic_fmri

        conditions = self.conditions(p, binary)
        data = make_synthetic_fmri(seed, conditions=conditions, clients=p.clients or DEFAULT_CLIENTS,
                                   **{k: getattr(p, k) for k in self.GENERATOR_KEYS})
        info = {"dataset": self.name, "classes": conditions, "w_true": data.truth,
                "bayes_accuracy": data.bayes_accuracy}
        return clients_from_pairs(data.train), clients_from_pairs(data.val) if data.val else None, info

    def estimated_bytes(self, p):
        scans = ((p.clients or DEFAULT_CLIENTS) + p.val_clients) * p.subjects_per_client * p.scans_per_subject
        return {f"the synthetic_fmri scans ({scans:,} x {p.grid}^3 voxels, float64, twice; "
                f"problem.clients, val_clients, subjects_per_client, scans_per_subject, grid)":
                2 * 8 * scans * p.grid ** 3}

    def features_classes(self, p):
        return p.grid ** 3, p.conditions

    def check(self, p):
        if p.support > p.grid ** 3:
            raise ValueError(f"problem.support must be in [1, {p.grid ** 3}] (problem.grid^3 "
                             f"voxels at grid={p.grid}), got {p.support}")


DATASETS: dict[str, Dataset] = {d.name: d for d in (Digits(), BreastCancer(), Haxby(), Emnist(), SyntheticFmri())}
