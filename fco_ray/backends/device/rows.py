"""Metrics on the device: which ones a group's program computes (the problem's `MetricRule`,
`fco_ray.rules.metrics`, over the rule's output model and each extra output), and the table
(members x metrics) it returns as the engine's rows."""
from __future__ import annotations

import numpy as np


def metric_names(jax, rule, problem_rule, metrics, members, hyper) -> list[str]:
    """The columns of a group's rows: the metrics of the output model, then those of each
    extra output suffixed by its name (`evaluate_one`'s order); the suffixes come from the
    rule's `extra_outputs` traced on shapes only."""
    one = jax.tree_util.tree_map(lambda v: jax.ShapeDtypeStruct(v.shape[1:], v.dtype), members)
    own = {k: jax.ShapeDtypeStruct(v.shape[1:], v.dtype) for k, v in hyper.items()}
    extra = jax.eval_shape(lambda st, hy: rule.extra_outputs(problem_rule, st, hy), one, own)
    return list(metrics.names) + [f"{n}_{suffix}" for suffix in extra for n in metrics.names]


def table_rows(table, names: list[str], g: int) -> list[dict[str, float]]:
    """The first g members' rows of a (G_padded, M) table, as plain floats."""
    values = np.asarray(table)[:g].tolist()
    return [dict(zip(names, row)) for row in values]
