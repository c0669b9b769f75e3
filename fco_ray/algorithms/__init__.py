"""Registry of algorithms by name."""
from __future__ import annotations

from .base import Algorithm, Hyper
from .baselines import Centralized
from .composite import (
    FedAvg,
    FedAvgSubgrad,
    FedDualAvg,
    FedDualAvgOSP,
    FedMiD,
    FedMiDOSP,
    Local,
)
from .saddle import PGDA, ExtragradLocalSGD, FedMiP, FeDualEx
from .svrg import ALL as SVRG_FAMILY

ALGORITHMS: dict[str, type[Algorithm]] = {}


def register_algorithm(cls: type[Algorithm] | None = None, *, replace: bool = False):
    """Add an Algorithm subclass to the registry under `cls.name`; usable as
    `@register_algorithm` or `@register_algorithm(replace=True)`. A name already registered by
    another class (a built-in such as `fedavg`) is a ConfigError naming both, unless
    `replace=True`; the same class again, or one of the same module and qualified name (a
    module reloaded, a notebook cell run twice), is not a clash."""
    from ..registry import check_free, qualified
    from ..runtime.errors import ConfigError

    def wrap(cls):
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{qualified(cls)}: an algorithm class needs a class attribute "
                              "`name` (a non-empty string) to be registered by")
        check_free("algorithm", name, cls, ALGORITHMS.get(name), replace,
                   "fco_ray.register_algorithm(replace=True)")
        ALGORITHMS[name] = cls
        return cls

    return wrap if cls is None else wrap(cls)


for _cls in (FedAvg, FedAvgSubgrad, FedMiD, FedMiDOSP, FedDualAvg, FedDualAvgOSP, Local, Centralized):
    register_algorithm(_cls)
for _cls in (FeDualEx, FedMiP, ExtragradLocalSGD, PGDA):
    register_algorithm(_cls)
for _cls in SVRG_FAMILY:  # gd, fsvrg, fsvrg_naive, dane, cocoa_plus
    register_algorithm(_cls)

__all__ = ["ALGORITHMS", "Algorithm", "Hyper", "register_algorithm"]
