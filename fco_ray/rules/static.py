"""Rules as static arguments of compiled programs: equal when they trace the same program.

`fco_ray.rules.host` compiles a rule's pieces with `jax.jit`, the rule and the problem rule as
static arguments: JAX then reuses a compiled program for every later run, group or trial of the
process whose rules are equal (a new rule object per run would compile anew each time). Two
rules are equal when they are of one class and hold equal settings (`static_key`): numbers,
names, blocks of psi; anything else they hold (a problem and its data, an array) counts by
identity, so a rule that holds one is never taken for another.
"""
from __future__ import annotations

from numbers import Number


def static_key(value):
    """A hashable key of what `value` traces by: numbers, strings, None and bools as they are;
    dicts, lists and tuples by their items; pydantic models by their fields; objects with
    `static_fields` (rules, psi blocks) by their class and those fields' keys; anything else
    by identity."""
    if value is None or isinstance(value, (Number, str)):
        return value
    if isinstance(value, dict):
        return tuple(sorted((k, static_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(static_key(v) for v in value)
    if hasattr(value, "model_dump"):  # a pydantic model (hyperparameters)
        return (type(value), static_key(value.model_dump()))
    if isinstance(value, Static):
        return value.key()
    return ("id", id(value))


class Static:
    """A rule (or a part of one) compared by its class and settings (`static_key`); the
    attributes named in `static_skip` do not count (a problem whose own settings are
    recorded on the rule, beside it)."""

    static_skip: tuple[str, ...] = ()

    def key(self) -> tuple:
        """The class and the settings' keys, computed at the first call (a rule is complete
        before it is compiled) and kept: a compiled call compares it every time."""
        if "_key" not in vars(self):
            self._key = (type(self),) + tuple((k, static_key(v)) for k, v in sorted(vars(self).items())
                                              if k not in self.static_skip)
        return self._key

    def __eq__(self, other):
        return type(other) is type(self) and self.key() == other.key()

    def __hash__(self):
        return hash(self.key())
