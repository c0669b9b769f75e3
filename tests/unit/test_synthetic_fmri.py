"""The synthetic_fmri stand-in (E3, E4): its truth is sparse and smooth as declared, its
voxels correlated as declared, its draws keyed by the seed, its options checked."""
from __future__ import annotations

import numpy as np
import pytest

from fco_ray.core.config import parse_problem
from fco_ray.data.synthetic_fmri import make_synthetic_fmri, smoothed_noise
from fco_ray.problems import build_problem
from fco_ray.runtime.errors import ConfigError

SMALL = dict(grid=8, clients=4, val_clients=2, subjects_per_client=2, scans_per_subject=10)


def roughness(volume: np.ndarray) -> float:
    """Mean squared difference of neighbouring voxels along the three axes."""
    return float(np.mean([np.mean(np.diff(volume, axis=a) ** 2) for a in range(3)]))


@pytest.mark.parametrize("conditions", [2, 4])
def test_truth_has_exactly_the_declared_support(conditions):
    data = make_synthetic_fmri(0, conditions=conditions, support=40, **SMALL)
    truth = data.truth.reshape(8 ** 3, -1)
    maps = truth if conditions == 2 else truth[:, 1:]
    assert data.truth.shape == ((512,) if conditions == 2 else (512, conditions))
    if conditions > 2:
        assert not truth[:, 0].any()  # the reference condition
    assert [int(np.count_nonzero(m)) for m in maps.T] == [40] * (conditions - 1)
    for m in maps.T:  # bumps of alternating sign: regions for and against the condition
        assert (m > 0).any() and (m < 0).any()


def test_truth_is_smooth_and_smoother_with_more_smoothness():
    rng = np.random.default_rng(0)
    rough = {}
    for width in (1.0, 2.5):
        w = make_synthetic_fmri(3, smoothness=width, support=120, **SMALL).truth.reshape(8, 8, 8)
        shuffled = np.mean([roughness(rng.permutation(w.ravel()).reshape(w.shape)) for _ in range(20)])
        rough[width] = roughness(w) / shuffled
        assert rough[width] < 0.5  # neighbours far more alike than at random positions
    assert rough[2.5] < rough[1.0]


def test_voxel_noise_has_unit_variance_and_the_declared_correlation():
    rng = np.random.default_rng(1)
    for sigma, expected in ((1.0, np.exp(-1 / 4)), (0.0, 0.0)):
        e = smoothed_noise(rng, 400, 8, sigma).reshape(400, 8, 8, 8)
        assert e.var() == pytest.approx(1.0, abs=0.05)
        # Gaussian-smoothed white noise: neighbour correlation exp(-1 / (4 sigma^2))
        neighbour = np.mean(e[:, 1:] * e[:, :-1])
        assert neighbour == pytest.approx(expected, abs=0.05)


def test_layout_labels_and_seed():
    a = make_synthetic_fmri(5, **SMALL)
    b = make_synthetic_fmri(5, **SMALL)
    c = make_synthetic_fmri(6, **SMALL)
    assert len(a.train) == 4 and len(a.val) == 2
    assert all(x.shape == (20, 512) and y.shape == (20,) for x, y in a.train + a.val)
    for (xa, ya), (xb, yb) in zip(a.train, b.train):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a.truth, c.truth)
    y = np.concatenate([y for _, y in a.train])
    assert set(np.unique(y)) == {0, 1}
    assert 0.6 < a.bayes_accuracy <= 1.0  # labels carry signal


def test_problems_report_support_recovery_against_the_truth():
    problem = build_problem(parse_problem({"name": "sparse_logreg", "dataset": "synthetic_fmri", **SMALL}), 0)
    truth = problem.info["w_true"]
    metrics = problem.metrics({"w": truth, "b": np.zeros(())})
    assert metrics["f1"] == 1.0 and metrics["density"] == pytest.approx(50 / 512)
    multi = build_problem(parse_problem({"name": "constrained_logreg", "dataset": "synthetic_fmri",
                                         "conditions": 3, **SMALL}), 0)
    assert multi.shapes["w"] == (512, 3)
    mlp = build_problem(parse_problem({"name": "mlp", "dataset": "synthetic_fmri", "hidden": [4], **SMALL}), 0)
    assert mlp.shapes["w0"] == (512, 4) and mlp.shapes["w1"] == (4, 2)


@pytest.mark.parametrize("raw, words", [
    ({"name": "sparse_logreg", "dataset": "synthetic_fmri", "grid": 4, "support": 65},
     ["problem.support", "65", "[1, 64]"]),
    ({"name": "sparse_logreg", "grid": 4}, ["problem.grid", "synthetic_fmri", "digits"]),
    ({"name": "constrained_logreg", "conditions": 3}, ["problem.conditions", "synthetic_fmri"]),
    ({"name": "mlp", "dataset": "synthetic_fmri", "conditions": 1}, ["conditions", "2"]),
    ({"name": "sparse_logreg", "dataset": "synthetic_fmri", "smoothness": 0}, ["smoothness", "0"]),
    ({"name": "sparse_logreg", "dataset": "synthetic_fmri", "grid": 1}, ["grid", "2"]),
    ({"name": "sparse_logreg", "dataset": "synthetic_fmri", "signal": "inf"}, ["signal"]),
])
def test_bad_options_name_the_key_and_value(raw, words):
    with pytest.raises(ConfigError) as e:
        parse_problem(raw)
    for w in words:
        assert w in str(e.value)
