"""`ConfigError`: invalid user input (the CLI's exit code 2). A leaf module, so that data
readers can raise it without importing the configuration schema."""
from __future__ import annotations

import reprlib

MAX_MESSAGE = 2000  # characters; an error is one readable line, never the whole input


class ConfigError(ValueError):
    """Invalid user input (config file, key, value, data file).

    The message is cut to MAX_MESSAGE characters: it may quote user input, and a hostile
    input (e.g. YAML aliases expanding to millions of nodes) must not become an 80 MB line.
    """

    def __init__(self, message: str = ""):
        message = str(message)
        if len(message) > MAX_MESSAGE:
            message = f"{message[:MAX_MESSAGE]}... ({len(message):,} characters, cut)"
        super().__init__(message)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8
_REPR.maxlevel = 3


def short_repr(value) -> str:
    """repr(value) for an error message: bounded in length, and in time for nested data
    (reprlib stops at a few items per container and a few levels)."""
    return _REPR.repr(value)
