"""Numbers are numbers: a boolean is never taken where a number is expected.

Pydantic's lax mode turns True into 1 / 1.0, and YAML 1.1 reads yes/no/on/off/true/false as
booleans, so `rounds: yes` would silently run one round and `client_lr: on` would run at
rate 1.0. `no_bool_numbers` is one check that each base
model attaches once as a "before" model validator (config sections, problem parameters,
algorithm hyperparameters, the sweep file), so every field of every subclass is covered: a bool -- also inside a list,
tuple or mapping value -- is rejected wherever the field's type is numeric and does not
itself admit a bool. Everything else (e.g. the string "1e-3" for a float) keeps pydantic's
usual parsing.
"""
from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic_core import PydanticCustomError

from .errors import short_repr

_SEQUENCES = (list, tuple, set, frozenset, typing.Sequence, typing.Collection)


def _members(annotation) -> list:
    """The alternatives of a (possibly Annotated / Optional / union) annotation."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _members(arg)]
    return [annotation]


def _admits_bool(members: list) -> bool:
    return any(m is bool or m is Any or (get_origin(m) is Literal and any(
        isinstance(a, bool) for a in get_args(m))) for m in members)


def _bool_where_number(value, annotation) -> bool:
    members = _members(annotation)
    if isinstance(value, bool):
        return any(m in (int, float) for m in members) and not _admits_bool(members)
    if isinstance(value, (list, tuple)):
        items = [a for m in members if get_origin(m) in _SEQUENCES for a in get_args(m) if a is not ...]
        return bool(items) and any(_bool_where_number(v, Union[tuple(items)]) for v in value)
    if isinstance(value, dict):
        values = [get_args(m)[1] for m in members if get_origin(m) is dict and len(get_args(m)) == 2]
        return bool(values) and any(_bool_where_number(v, Union[tuple(values)]) for v in value.values())
    return False


def no_bool_numbers(cls, data):
    """A `model_validator(mode="before")`: attach as
    `_no_bools = model_validator(mode="before")(no_bool_numbers)`. The error has type
    "bool_not_number" and the offending key in its context (fco_ray.core.config names it)."""
    if isinstance(data, dict):
        for key, value in data.items():
            field = cls.model_fields.get(key) if isinstance(key, str) else None
            if field is not None and _bool_where_number(value, field.annotation):
                where = "the boolean" if isinstance(value, bool) else "a boolean in"
                raise PydanticCustomError(
                    "bool_not_number", "expected a number, got {where} {value} (YAML reads "
                    "yes/no/on/off/true/false as booleans)",
                    {"key": key, "where": where, "value": short_repr(value)})
    return data
