"""The datasets table of the classification problems (fco_ray.data.datasets) and the
hyperparameters read as declared fields."""
from __future__ import annotations

import re
import typing

import pytest

from fco_ray.algorithms import ALGORITHMS
from fco_ray.core.config import parse_problem
from fco_ray.data.datasets import DATASETS
from fco_ray.problems import build_problem
from fco_ray.problems.logistic import ConstrainedLogRegParams, SparseLogRegParams
from fco_ray.problems.mlp import MlpParams
from fco_ray.runtime.errors import ConfigError

PARAMS = (SparseLogRegParams, ConstrainedLogRegParams, MlpParams)


def declared_datasets(params) -> set[str]:
    return set(typing.get_args(params.model_fields["dataset"].annotation))


def test_every_declared_dataset_has_its_object_and_every_object_a_problem():
    declared = set().union(*(declared_datasets(p) for p in PARAMS))
    assert declared == set(DATASETS)
    assert all(name == d.name for name, d in DATASETS.items())


def test_the_local_dataset_of_each_problem_is_declared():
    for params in PARAMS:
        assert params.LOCAL_DATASET in declared_datasets(params)
        assert parse_problem({"name": params.model_fields["name"].default, "path": "/x"}).dataset \
            == params.LOCAL_DATASET


def test_own_keys_are_fields_and_owned_once():
    owned = [k for d in DATASETS.values() for k in d.own_keys]
    assert len(owned) == len(set(owned))
    fields = set().union(*(p.model_fields for p in PARAMS))
    assert set(owned) <= fields
    assert all(k in fields for d in DATASETS.values() for k in d.unset_keys)


@pytest.mark.parametrize("raw, message", [
    ({"name": "sparse_logreg", "dataset": "haxby", "clients": 3},
     "problem.clients must be unset for dataset 'haxby' (one client per session), got 3"),
    ({"name": "constrained_logreg", "conditions": 4},
     "problem.conditions is only used by dataset 'synthetic_fmri', got dataset 'digits' with conditions=4"),
    ({"name": "sparse_logreg", "dataset": "synthetic_fmri", "grid": 2, "support": 9},
     "problem.support must be in [1, 8] (problem.grid^3 voxels at grid=2), got 9"),
])
def test_dataset_key_errors(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_problem(raw)


def test_memory_estimates_and_dimensions_are_known_before_loading():
    for params in PARAMS:
        name = params.model_fields["name"].default
        for dataset in declared_datasets(params):
            p = parse_problem({"name": name, "dataset": dataset})
            parts = p.estimated_bytes()
            assert parts and all(isinstance(v, int) and v > 0 for v in parts.values())
    mlp = parse_problem({"name": "mlp", "dataset": "synthetic_fmri", "grid": 4, "conditions": 3})
    assert DATASETS["synthetic_fmri"].features_classes(mlp) == (64, 3)
    assert DATASETS["emnist"].features_classes(parse_problem({"name": "mlp", "dataset": "emnist",
                                                               "only_digits": False})) == (784, 62)


@pytest.mark.parametrize("raw, classes", [
    ({"name": "sparse_logreg"}, 2),
    ({"name": "sparse_logreg", "dataset": "breast_cancer"}, 2),
    ({"name": "constrained_logreg"}, 10),
    ({"name": "constrained_logreg", "dataset": "synthetic_fmri", "grid": 3, "support": 5,
      "clients": 2, "val_clients": 1, "subjects_per_client": 1, "scans_per_subject": 6, "conditions": 3}, 3),
])
def test_info_names_the_dataset_and_its_classes(raw, classes):
    p = parse_problem(raw)
    problem = build_problem(p, 0)
    assert problem.info["dataset"] == p.dataset and problem.info["classes"] == classes
    if p.dataset != "synthetic_fmri":
        features, _ = DATASETS[p.dataset].features_classes(p)
        assert problem.shapes["w"][0] == features


def test_breast_cancer_alone_is_standardized():
    assert [d.name for d in DATASETS.values() if d.standardized] == ["breast_cancer"]
    x = build_problem(parse_problem({"name": "sparse_logreg", "dataset": "breast_cancer",
                                     "test_fraction": 0.0}), 0).train.pooled()["x"]
    assert abs(x.mean(axis=0)).max() < 1e-9 and abs(x.std(axis=0) - 1).max() < 1e-9


def test_minibatch_is_the_declared_batch_size_or_none():
    for name, algorithm in ALGORITHMS.items():
        hp = algorithm.Hyper(name=name)
        if "batch_size" in algorithm.Hyper.model_fields:
            assert hp.minibatch == hp.batch_size == 10
            assert algorithm.Hyper(name=name, batch_size=None).minibatch is None
        else:
            assert hp.minibatch is None


def test_prox_saddle_methods_declare_server_prox():
    """The PrimalSaddle rule reads `hp.server_prox` of the methods with proximal steps."""
    for algorithm in ALGORITHMS.values():
        if algorithm.rule == "fco_ray.rules.algorithms:PrimalSaddle" and algorithm.prox:
            assert "server_prox" in algorithm.Hyper.model_fields
