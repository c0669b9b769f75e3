"""Communicated floats of a member's round, from the shapes of its rule's broadcast and client
message (no arithmetic runs: `jax.eval_shape`)."""
from __future__ import annotations

import math

import numpy as np


def round_floats(jax, rule, problem_rule, data, members, hyper, clients: int) -> tuple[float, float]:
    """Floats a member's round sends up (its clients' messages) and down (the broadcast to
    each client); `members`, `hyper`: on the member axis (only their shapes are read)."""
    from ...rules.problems import Client

    # one member's shapes, not its values (slicing a JAX array would compile a program per shape)
    member = lambda v: jax.ShapeDtypeStruct(np.shape(v)[1:], v.dtype)  # noqa: E731
    one = jax.tree_util.tree_map(member, members)
    own = {k: member(v) for k, v in hyper.items()}
    me = Client(np.uint64(0), np.uint64(0), np.uint64(0), np.int64(1), np.int64(0))
    payload = jax.eval_shape(rule.broadcast, one)
    message = jax.eval_shape(lambda st, hy: rule.client(problem_rule, data, rule.broadcast(st), hy, me), one, own)
    count = lambda tree: sum(math.prod(v.shape) for v in jax.tree_util.tree_leaves(tree))  # noqa: E731
    return float(count(message) * clients), float(count(payload) * clients)
