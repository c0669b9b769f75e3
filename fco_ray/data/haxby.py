"""Haxby et al. (2001) fMRI, face vs house, one federated client per scanning session.

Reads a local copy in the layout that `nilearn.datasets.fetch_haxby` writes (checked against
nilearn's source):

    <data_dir>/haxby2001/mask.nii.gz               whole-brain mask, shared by all subjects
    <data_dir>/haxby2001/subj<i>/bold.nii.gz       4-D BOLD series (40 x 64 x 64 x 1452)
    <data_dir>/haxby2001/subj<i>/labels.txt        space-separated, header "labels chunks"
    <data_dir>/haxby2001/subj<i>/mask4_vt.nii.gz   the subject's ventral temporal mask

Samples are the scans labelled "face" (y = 1) or "house" (y = 0); a client is one session
("chunk", 9 face + 9 house scans). Subject 5's 9th session has no task labels, so subjects
1-5 give 59 training clients and subject 6 gives 12 validation clients.

Features are voxels of a mask common to all subjects (the model is shared):
- ``mask="vt"``: the union of the subjects' ventral temporal masks (``mask4_vt``);
- ``mask="brain"``: nilearn's whole-brain ``mask.nii.gz`` (39,912 voxels, the dimension
  reported for the FCO paper's experiment).
With ``standardize`` each voxel is z-scored within each session over all of its scans
(rest included) -- a client-local preprocessing that removes session offsets and drifts
in scale; constant voxels become 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..runtime.files import readable_file, reading
from ..runtime.limits import check_declared

LABELS = {"face": 1, "house": 0}
SUBJECTS = (1, 2, 3, 4, 5, 6)
HOW_TO_GET = (
    "Haxby 2001 must be present locally (it is never downloaded here). On a machine with network access run\n"
    "    python -c \"from nilearn import datasets; datasets.fetch_haxby(data_dir='DIR', subjects=6)\"\n"
    "(about 2 GB; it writes DIR/haxby2001/...), copy DIR to this machine and pass it as the data "
    "directory (problem.path=DIR)."
)


@dataclass
class HaxbyData:
    """Per-session (x, y) pairs: x (scans, voxels) float32, y (scans,) int64 in {0, 1}."""

    train: list[tuple[np.ndarray, np.ndarray]]
    val: list[tuple[np.ndarray, np.ndarray]]
    sessions_train: list[tuple[int, int]]  # (subject, session) of each training client
    sessions_val: list[tuple[int, int]]
    voxels: int


def find_root(data_dir: str | Path | None) -> Path:
    """The `haxby2001` directory under `data_dir`, or under nilearn's default data
    directories ($NILEARN_SHARED_DATA, $NILEARN_DATA, ~/nilearn_data) when `data_dir` is None."""
    if data_dir is not None:
        candidates = [Path(data_dir).expanduser()]
    else:
        from nilearn.datasets import get_data_dirs

        candidates = [Path(d) for d in get_data_dirs()]
    for base in candidates:
        for root in (base / "haxby2001", base):
            if any(root.glob("subj[1-6]")) or (root / "mask.nii.gz").is_file():
                return root
    where = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"no Haxby dataset (a 'haxby2001' directory) found in {where}.\n{HOW_TO_GET}")


def _require(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"Haxby file missing: {path}\n{HOW_TO_GET}")
    return path


def _load_volume(path: Path) -> np.ndarray:
    from nibabel.filebasedimages import ImageFileError
    from nilearn.image import load_img

    with reading(readable_file(path, "Haxby file"), "Haxby file", "a NIfTI image (.nii.gz)",
                 also=(ImageFileError,)):
        image = load_img(str(path))  # the header only: the voxels are read by get_fdata
        shape = tuple(int(n) for n in image.shape)
        check_declared(path, "Haxby file", math.prod(shape) * 4, f"a volume of shape {shape}")
        return np.asarray(image.get_fdata(dtype=np.float32))


def _read_labels(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    with reading(readable_file(path, "Haxby file"), "Haxby file", "text with a header 'labels chunks'"):
        table = pd.read_csv(path, sep=r"\s+")
    if not {"labels", "chunks"} <= set(table.columns):
        raise ValueError(f"{path}: expected the columns 'labels chunks', got {list(table.columns)}")
    return table["labels"].to_numpy(str), table["chunks"].to_numpy(np.int64)


def common_mask(root: Path, subjects, kind: str) -> np.ndarray:
    """Boolean 3-D voxel mask shared by `subjects` (see the module docstring)."""
    if kind == "brain":
        return _load_volume(_require(root / "mask.nii.gz")) > 0
    if kind == "vt":
        masks = [_load_volume(_require(root / f"subj{s}" / "mask4_vt.nii.gz")) > 0 for s in subjects]
        shapes = {m.shape for m in masks}
        if len(shapes) != 1:
            raise ValueError(f"the subjects' ventral temporal masks have different shapes {shapes}")
        return np.logical_or.reduce(masks)
    raise ValueError(f"Haxby mask must be 'vt' or 'brain', got {kind!r}")


def _zscore(x: np.ndarray) -> np.ndarray:
    std = x.std(axis=0)
    return np.where(std > 0, (x - x.mean(axis=0)) / np.where(std > 0, std, 1.0), 0.0).astype(np.float32)


def subject_sessions(root: Path, subject: int, mask: np.ndarray, standardize: bool):
    """[(session, x, y)] for every session of `subject` with face or house scans."""
    labels, chunks = _read_labels(_require(root / f"subj{subject}" / "labels.txt"))
    bold = _load_volume(_require(root / f"subj{subject}" / "bold.nii.gz"))
    if bold.ndim != 4 or bold.shape[:3] != mask.shape or bold.shape[3] != len(labels):
        raise ValueError(f"subject {subject}: bold.nii.gz has shape {bold.shape}; expected "
                         f"{mask.shape} x {len(labels)} scans (one per line of labels.txt)")
    scans = bold[mask].T  # (time, voxels)
    del bold
    out = []
    for session in np.unique(chunks):
        rows = chunks == session
        x = _zscore(scans[rows]) if standardize else scans[rows]
        keep = np.isin(labels[rows], list(LABELS))
        if keep.any():
            y = np.array([LABELS[lab] for lab in labels[rows][keep]], dtype=np.int64)
            out.append((int(session), x[keep], y))
    return out


def load_haxby(data_dir: str | Path | None = None, train_subjects=(1, 2, 3, 4, 5),
               val_subjects=(6,), mask: str = "vt", standardize: bool = True) -> HaxbyData:
    """Face-vs-house scans of a local nilearn-layout copy, one client per session."""
    for name, subs in (("train_subjects", train_subjects), ("val_subjects", val_subjects)):
        bad = [s for s in subs if s not in SUBJECTS]
        if bad:
            raise ValueError(f"Haxby {name} must be among {list(SUBJECTS)}, got {list(subs)}")
    if not train_subjects:
        raise ValueError("Haxby train_subjects must name at least one subject")
    overlap = set(train_subjects) & set(val_subjects)
    if overlap:
        raise ValueError(f"Haxby subjects {sorted(overlap)} are both training and validation subjects")
    root = find_root(data_dir)
    voxel_mask = common_mask(root, list(train_subjects) + list(val_subjects), mask)
    parts = {}
    for role, subs in (("train", train_subjects), ("val", val_subjects)):
        parts[role] = [(s, sess, x, y) for s in subs
                       for sess, x, y in subject_sessions(root, s, voxel_mask, standardize)]
    return HaxbyData(
        train=[(x, y) for _, _, x, y in parts["train"]],
        val=[(x, y) for _, _, x, y in parts["val"]],
        sessions_train=[(s, sess) for s, sess, _, _ in parts["train"]],
        sessions_val=[(s, sess) for s, sess, _, _ in parts["val"]],
        voxels=int(voxel_mask.sum()),
    )
