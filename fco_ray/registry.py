"""The check of the registries by name (`fco_ray.algorithms.register_algorithm`,
`fco_ray.problems.register_problem`): a name already taken -- a built-in such as `fedavg`, or
another user class -- is refused with a ConfigError naming both, unless the caller says the
new one replaces the old (`replace=True`). Registering the same object again, or one of the
same module and qualified name (a module reloaded, a notebook cell run twice), is not a clash.
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
