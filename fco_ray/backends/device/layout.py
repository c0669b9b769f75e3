"""The member layout: a group's state (the engine's layout: a stacked group's arrays on a
leading member axis, numbers shared by its members; a single run's own leaves) as arrays on
a member axis padded to a power of two, and back; the members' hyperparameters as arrays."""
from __future__ import annotations

import numpy as np


def padded_size(g: int) -> int:
    """Members padded to a power of two: fewer compilations as members leave."""
    return 1 << max(0, (g - 1).bit_length())


def pad(values: np.ndarray, size: int) -> np.ndarray:
    """Members padded to `size` with copies of member 0 (padding never runs: alive is False)."""
    return np.concatenate([values, np.repeat(values[:1], size - len(values), axis=0)]) if size > len(values) else values


def pad_tree(tree, size: int):
    if isinstance(tree, dict):
        return {k: pad_tree(v, size) for k, v in tree.items()}
    return pad(tree, size)


def member_hyper(group, problem_rule, seeds: list[int]) -> dict[str, np.ndarray]:
    """The `hyper` of the members' rules: every real-valued hyperparameter (one value per
    member, whether or not it varies: a rule reads them all from here), psi's weight `lam`
    (each member's own) and the seed."""
    fields = group.hp.real_fields()
    hyper = {f: np.array([np.nan if getattr(m.hp, f) is None else getattr(m.hp, f) for m in group.members],
                         float) for f in fields}
    lams = group.lams if group.lams is not None else [problem_rule.lam] * group.size
    return {**hyper, "lam": np.asarray(lams, float), "seed": np.asarray(seeds, np.uint64)}


def to_members(group, state) -> dict:
    """The group's state with every leaf on a leading member axis (G, ...): a stacked group's
    arrays already are; its numbers shared by the members, and a single run's leaves, get one."""
    g = group.size

    def lift(v):
        if isinstance(v, dict):
            return {k: lift(x) for k, x in v.items()}
        v = np.asarray(v)
        if group.stacked and v.ndim:
            return v
        return np.broadcast_to(v, (g,) + v.shape).copy()

    return lift(state)


def from_members(group, arrays, template):
    """Member-axis arrays back in the group's layout, following `template` (the state the
    rounds started from): a number stays a number where every member has the same value."""

    def drop(v, t):
        if isinstance(t, dict):
            return {k: drop(v[k], t[k]) for k in t}
        number = np.ndim(t) == 0 and not isinstance(t, np.ndarray)
        if not group.stacked:
            return type(t)(v[0].item()) if number else v[0]
        return type(t)(v[0].item()) if number and np.all(v == v[0]) else v

    return drop(arrays, template)
