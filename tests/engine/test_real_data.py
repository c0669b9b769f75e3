"""Loaders of real data on tiny fabricated copies: Haxby in nilearn's layout (NIfTI) and
federated EMNIST in TFF's HDF5 layout, plus short federated runs on them."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
nib = pytest.importorskip("nibabel")

import fco_ray  # noqa: E402
from fco_ray.core.config import parse_problem  # noqa: E402
from fco_ray.data.emnist import load_emnist  # noqa: E402
from fco_ray.data.haxby import load_haxby  # noqa: E402
from fco_ray.problems import build_problem  # noqa: E402
from fco_ray.runtime.errors import ConfigError  # noqa: E402

from tests.unit.test_logistic import run_checked  # noqa: E402

GRID = (4, 5, 3)  # a tiny "brain" (the real one is 40 x 64 x 64)
SESSION = ["rest"] * 2 + ["face"] * 4 + ["house"] * 4 + ["rest", "cat"]  # 12 scans per session
FACE_VOXELS, HOUSE_VOXELS = [0, 1, 2, 3], [4, 5, 6, 7]  # indices into the VT mask's voxels


def _save(path, array):
    nib.Nifti1Image(np.asarray(array, dtype=np.float32), np.eye(4)).to_filename(str(path))


@pytest.fixture(scope="module")
def haxby_dir(tmp_path_factory):
    """nilearn's fetch_haxby layout: haxby2001/{mask.nii.gz, subj<i>/{bold.nii.gz, labels.txt,
    mask4_vt.nii.gz}}; 6 subjects x 2 sessions; subject 5's second session has only rest
    (like the real data, whose subject 5 run 8 has no task labels)."""
    base = tmp_path_factory.mktemp("nilearn_data")
    root = base / "haxby2001"
    root.mkdir()
    rng = np.random.default_rng(0)
    brain = np.zeros(GRID, bool)
    brain[:, 1:, :] = True
    _save(root / "mask.nii.gz", brain)
    (root / "MD5SUMS").write_text("")  # fetch_haxby keeps its checksum list here
    flat_vt = np.flatnonzero(brain)
    for subject in range(1, 7):
        sub = root / f"subj{subject}"
        sub.mkdir()
        vt = np.zeros(np.prod(GRID), bool)
        vt[flat_vt[:12]] = True  # shared VT voxels carry the signal
        vt[rng.choice(flat_vt[12:], 3, replace=False)] = True  # plus a few subject-specific ones
        vt = vt.reshape(GRID)
        _save(sub / "mask4_vt.nii.gz", vt)
        labels, chunks, scans = [], [], []
        for session in range(2):
            names = ["rest"] * len(SESSION) if (subject, session) == (5, 1) else SESSION
            offset = rng.normal(0, 5, GRID)  # session-specific drift that standardization removes
            for name in names:
                scan = offset + rng.normal(0, 1, GRID)
                signal = {"face": FACE_VOXELS, "house": HOUSE_VOXELS}.get(name, [])
                scan.reshape(-1)[flat_vt[signal]] += 3.0
                scans.append(scan)
                labels.append(name)
                chunks.append(session)
        _save(sub / "bold.nii.gz", np.stack(scans, axis=-1))
        (sub / "labels.txt").write_text("labels chunks\n" + "".join(
            f"{lab} {c}\n" for lab, c in zip(labels, chunks)))
    return base


def test_haxby_loader_layout_clients_and_labels(haxby_dir):
    data = load_haxby(haxby_dir)
    # one client per session with face/house scans: 5 subjects x 2 - 1 (subject 5 session 1)
    assert data.sessions_train == [(s, k) for s in range(1, 6) for k in range(2) if (s, k) != (5, 1)]
    assert data.sessions_val == [(6, 0), (6, 1)]
    vt_union = np.logical_or.reduce([
        np.asarray(nib.load(str(haxby_dir / "haxby2001" / f"subj{s}" / "mask4_vt.nii.gz")).dataobj) > 0
        for s in range(1, 7)])
    assert data.voxels == vt_union.sum() > 12
    for x, y in data.train + data.val:
        assert x.shape == (8, data.voxels) and x.dtype == np.float32
        np.testing.assert_array_equal(y, [1] * 4 + [0] * 4)  # face = 1, house = 0, in scan order
        # the injected pattern: face scans are high on the face voxels, house scans on house voxels
        assert x[y == 1][:, FACE_VOXELS].mean() > x[y == 0][:, FACE_VOXELS].mean() + 1
        assert x[y == 0][:, HOUSE_VOXELS].mean() > x[y == 1][:, HOUSE_VOXELS].mean() + 1
        # z-scored within the session over all 12 scans: the 8 task scans are O(1), no drift
        assert np.abs(x).max() < 4


def test_haxby_brain_mask_and_raw_values(haxby_dir):
    data = load_haxby(haxby_dir, train_subjects=[1], val_subjects=[], mask="brain", standardize=False)
    assert data.voxels == 4 * 4 * 3 and data.val == []
    bold = np.asarray(nib.load(str(haxby_dir / "haxby2001" / "subj1" / "bold.nii.gz")).dataobj)
    brain = np.asarray(nib.load(str(haxby_dir / "haxby2001" / "mask.nii.gz")).dataobj) > 0
    np.testing.assert_allclose(data.train[0][0], bold[brain].T[2:10])  # session 0: scans 2..9


def test_haxby_missing_data_says_how_to_get_it(tmp_path, haxby_dir):
    with pytest.raises(FileNotFoundError, match="fetch_haxby"):
        load_haxby(tmp_path)
    partial = tmp_path / "copy"
    shutil.copytree(haxby_dir, partial)
    (partial / "haxby2001" / "subj3" / "bold.nii.gz").unlink()
    with pytest.raises(FileNotFoundError, match=r"subj3.bold\.nii\.gz(.|\n)*fetch_haxby"):
        load_haxby(partial)
    cfg = {"problem": {"name": "sparse_logreg", "path": str(tmp_path / "nowhere")},
           "algorithm": {"name": "feddualavg"}}
    with pytest.raises(ConfigError, match="fetch_haxby"):
        fco_ray.run(cfg)


def test_haxby_found_in_nilearn_data_dir(haxby_dir, monkeypatch):
    monkeypatch.setenv("NILEARN_DATA", str(haxby_dir))
    monkeypatch.delenv("NILEARN_SHARED_DATA", raising=False)
    problem = build_problem(parse_problem({"name": "sparse_logreg", "dataset": "haxby"}), 0)
    assert problem.num_clients == 9 and problem.val.num_clients == 2


def test_short_federated_run_on_fabricated_haxby(haxby_dir):
    df = fco_ray.run({
        "problem": {"name": "sparse_logreg", "path": str(haxby_dir), "lam": 0.01},
        "algorithm": {"name": "feddualavg", "client_lr": 0.1, "clients_per_round": 5,
                      "local_steps": 5, "batch_size": 4},
        "rounds": 30, "eval_every": 10})
    assert df.attrs["status"] == "finished"
    assert df.attrs["config"]["problem"]["dataset"] == "haxby"
    first, last = df.iloc[0], df.iloc[-1]
    assert last["train_loss"] < 0.5 * first["train_loss"]
    assert last["val_accuracy"] >= 0.9  # the held-out subject
    assert last["density"] < 0.9  # l1: uninformative voxels are zero


# ---- federated EMNIST -------------------------------------------------------------------

WRITERS = ["f0000_14", "f0001_41", "f0002_03", "f0003_22", "f0004_07"]


def _digit_images(rng, labels):
    """28x28 images in [0, 1]: a bright 3-row band at a label-dependent height, plus noise."""
    pixels = rng.uniform(0, 0.3, (len(labels), 28, 28)).astype(np.float32)
    for i, lab in enumerate(labels):
        pixels[i, 2 * lab + 3: 2 * lab + 6, 4:24] = 1.0
    return pixels


@pytest.fixture(scope="module")
def emnist_dir(tmp_path_factory):
    """TFF layout: fed_emnist_digitsonly_{train,test}.h5 with examples/<writer>/{pixels,label};
    the last writer has no test examples."""
    base = tmp_path_factory.mktemp("emnist")
    rng = np.random.default_rng(0)
    for split, sizes in (("train", [30, 12, 25, 40, 18]), ("test", [6, 4, 5, 7, 0])):
        with h5py.File(base / f"fed_emnist_digitsonly_{split}.h5", "w") as f:
            for writer, n in zip(WRITERS, sizes):
                if n == 0:
                    continue
                labels = rng.integers(0, 10, n).astype(np.int32)
                f.create_dataset(f"examples/{writer}/pixels", data=_digit_images(rng, labels))
                f.create_dataset(f"examples/{writer}/label", data=labels)
    return base


def test_emnist_loader(emnist_dir):
    data = load_emnist(emnist_dir)
    assert data.client_ids == WRITERS and data.classes == 10
    assert [len(y) for _, y in data.train] == [30, 12, 25, 40, 18]
    assert [len(y) for _, y in data.test] == [6, 4, 5, 7, 0]
    x, y = data.train[1]
    assert x.shape == (12, 784) and x.dtype == np.float32 and y.dtype == np.int64
    with h5py.File(emnist_dir / "fed_emnist_digitsonly_train.h5") as f:
        np.testing.assert_array_equal(x, f["examples/f0001_41/pixels"][()].reshape(12, 784))
        np.testing.assert_array_equal(y, f["examples/f0001_41/label"][()])
    some = load_emnist(emnist_dir / "fed_emnist_digitsonly_train.h5", clients=3, seed=1)
    assert len(some.client_ids) == 3 and set(some.client_ids) < set(WRITERS)
    assert some.client_ids == sorted(some.client_ids)
    assert load_emnist(emnist_dir, clients=3, seed=1).client_ids == some.client_ids


def test_emnist_errors(emnist_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="fed_emnist_train.h5(.|\n)*fed_emnist.tar.bz2"):
        load_emnist(emnist_dir, only_digits=False)
    with pytest.raises(ValueError, match=r"clients must be in \[1, 5\]"):
        load_emnist(emnist_dir, clients=6)
    for split in ("train", "test"):
        shutil.copy(emnist_dir / f"fed_emnist_digitsonly_{split}.h5", tmp_path)
    with h5py.File(tmp_path / "fed_emnist_digitsonly_train.h5", "a") as f:
        f["examples/f0002_03/label"][0] = 12
    with pytest.raises(ValueError, match=r"f0002_03.*expected \[0, 10\)"):
        load_emnist(tmp_path)


@pytest.mark.parametrize("name", ["constrained_logreg", "mlp"])
def test_constrained_run_on_fabricated_emnist(emnist_dir, name):
    raw = {"name": name, "path": str(emnist_dir)}
    if name == "mlp":
        raw.update(hidden=[16, 16], radius=50.0)
    problem = build_problem(parse_problem(raw), 0)
    assert problem.num_clients == 5 and problem.val.num_clients == 4  # writer 5 has no test data
    assert problem.shapes["w" if name == "constrained_logreg" else "w0"][0] == 784
    last = run_checked(problem, "feddualavg", rounds=20, client_lr=0.3, clients_per_round=3)
    assert last["train_accuracy"] > 0.7 and last["val_accuracy"] > 0.6


def test_sweep_files_validate_with_local_data(haxby_dir, emnist_dir):
    from fco_ray.sweep import load_sweep

    sweeps = Path(__file__).resolve().parents[2] / "sweeps"
    for name in ("e3_haxby", "e3_haxby_baselines"):
        # the fabricated set has 9 training sessions (the real one 59): sample fewer per round
        sweep = load_sweep(sweeps / f"{name}.yaml",
                           [f"problem.path={haxby_dir}", "algorithm.clients_per_round=5"])
        assert sweep.spec.problem["dataset"] == "haxby"
    with pytest.raises(ConfigError, match="fetch_haxby"):
        load_sweep(sweeps / "e3_haxby.yaml", [f"problem.path={haxby_dir / 'missing'}"])
    for name in ("e4_constrained", "e4_mlp"):
        load_sweep(sweeps / f"{name}.yaml")  # digits: runs anywhere
        sweep = load_sweep(sweeps / f"{name}.yaml", [f"problem.path={emnist_dir}", "problem.clients=3",
                                                            "algorithm.clients_per_round=3"])
        assert sweep.num_trials() > 0
