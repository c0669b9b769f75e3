"""Numbers are numbers: a boolean or a string is never taken where a number is expected.

Pydantic's lax mode turns True into 1 / 1.0, and YAML 1.1 reads yes/no/on/off/true/false as
booleans, so `rounds: yes` would silently run one round and `client_lr: on` would run at
rate 1.0. `no_bool_numbers` is one check that each base
model attaches once as a "before" model validator (config sections, problem parameters,
algorithm hyperparameters, the sweep file), so every field of every subclass is covered: a bool -- also inside a list,
tuple or mapping value -- is rejected wherever the field's type is numeric and does not
itself admit a bool; a string likewise (`client_lr: "0.01"`, `rounds="5"` from the API:
pydantic's lax mode would read them as numbers), unless the field admits text too (e.g.
`node_column: "qid" | int`). YAML's `1e-3` is a number, not text: the config loader
resolves exponent floats as YAML 1.2 does (fco_ray.runtime.files).
"""
from __future__ import annotations

import types
import typing
from pathlib import PurePath
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic_core import PydanticCustomError

from .errors import short_repr
from .values import plain

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


def _admits_str(members: list) -> bool:
    return any(m is Any or (isinstance(m, type) and issubclass(m, (str, PurePath)))
               or (get_origin(m) is Literal and any(isinstance(a, str) for a in get_args(m)))
               for m in members)


def _not_a_number(value, annotation) -> bool:
    """Whether `value` (or an item of it) is a bool or a string where `annotation` wants a
    number and admits neither."""
    members = _members(annotation)
    if isinstance(value, bool):
        return any(m in (int, float) for m in members) and not _admits_bool(members)
    if isinstance(value, str):
        return any(m in (int, float) for m in members) and not _admits_str(members)
    if isinstance(value, (list, tuple)):
        items = [a for m in members if get_origin(m) in _SEQUENCES for a in get_args(m) if a is not ...]
        return bool(items) and any(_not_a_number(v, Union[tuple(items)]) for v in value)
    if isinstance(value, dict):
        values = [get_args(m)[1] for m in members if get_origin(m) is dict and len(get_args(m)) == 2]
        return bool(values) and any(_not_a_number(v, Union[tuple(values)]) for v in value.values())
    return False


def _offender(value):
    """The bool or string that made `_not_a_number` true (for the message)."""
    if isinstance(value, (bool, str)):
        return value
    items = value.values() if isinstance(value, dict) else value
    return next((v for v in items if isinstance(v, (bool, str))), value)


def _why_text(text: str) -> str:
    """What is wrong with `text` where a number belongs: a number in quotes (text is never
    taken as a number) or text that is no number at all, and where it stops being one."""
    stripped = text.strip()
    try:
        float(stripped)
    except ValueError:
        pass
    else:
        return " (text is never taken as a number: write the number without quotes)"
    if not stripped:
        return " (empty text is not a number)"
    read = next((i for i in range(len(stripped) - 1, 0, -1) if _is_float(stripped[:i])), 0)
    if read == 0:
        return " (not a number)"
    return (f" (not a number: {short_repr(stripped[read:])} after the number "
            f"{short_repr(stripped[:read])})")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def no_bool_numbers(cls, data):
    """A `model_validator(mode="before")`: attach as
    `_no_bools = model_validator(mode="before")(no_bool_numbers)`. NumPy scalars and arrays
    in `data` are first taken as the Python values they hold (`runtime.values.plain`:
    `np.bool_(True)` is the boolean it is, `np.uint64(7)` the integer 7), so a section from
    the Python API is checked as the same section from YAML. The error has type
    "bool_not_number" and the offending key in its context (fco_ray.core.config names it)."""
    data = plain(data)
    if isinstance(data, dict):
        for key, value in data.items():
            field = cls.model_fields.get(key) if isinstance(key, str) else None
            if field is not None and _not_a_number(value, field.annotation):
                bad = _offender(value)
                kind = "boolean" if isinstance(bad, bool) else "string"
                what = (f"the {kind} {short_repr(bad)}" if bad is value
                        else f"a {kind} in {short_repr(value)}")
                what += (" (YAML reads yes/no/on/off/true/false as booleans)" if kind == "boolean"
                         else _why_text(bad))
                raise PydanticCustomError(
                    "bool_not_number", "expected a number, got {what}",
                    {"key": key, "what": what, "value": short_repr(value)})
    return data
