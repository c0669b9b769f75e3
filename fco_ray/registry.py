"""`fco_ray.register_algorithm`: the public way to add an algorithm by name, with the check
the registry itself lacks. A name already taken -- a built-in such as `fedavg`, or another
user class -- is refused with a ConfigError naming both classes, unless the caller says the
new class replaces the old (`replace=True`): before, a user class named `fedavg` silently
replaced the built-in, and every plain `fedavg` config then ran the user's class.

Registering the same class again, or a class of the same module and qualified name (a
module reloaded, a notebook cell run twice), is not a clash.
"""
from __future__ import annotations

from .runtime.errors import ConfigError


def qualified(obj) -> str:
    """`module.QualName` of a class or function (what an error names it by)."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def check_free(kind: str, name, new, old, replace: bool, how: str) -> None:
    """ConfigError if `name` already holds `old`, a different object than `new`."""
    if old is None or replace or old is new or qualified(old) == qualified(new):
        return
    raise ConfigError(f"{kind} name {name!r} is already registered by {qualified(old)}; "
                      f"{qualified(new)} cannot take it: choose another name, or say the new "
                      f"one replaces it ({how})")


def register_algorithm(cls=None, *, replace: bool = False):
    """Add an Algorithm subclass to the registry under `cls.name`; usable as `@register_algorithm`
    or `@register_algorithm(replace=True)`. A name already registered by another class is a
    ConfigError naming both, unless `replace=True`."""
    from .algorithms import ALGORITHMS, register_algorithm as add

    def wrap(cls):
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{qualified(cls)}: an algorithm class needs a class attribute "
                              "`name` (a non-empty string) to be registered by")
        check_free("algorithm", name, cls, ALGORITHMS.get(name), replace,
                   "fco_ray.register_algorithm(replace=True)")
        return add(cls)

    return wrap if cls is None else wrap(cls)
