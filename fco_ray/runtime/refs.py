"""References to code given as "module:name" strings: declared where importing the target now
would be too early (a JAX rule named by an algorithm class that configuration checks import)."""
from __future__ import annotations

import importlib


def resolve(ref):
    """A class or function given as itself or as "module:name" (imported now)."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
