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


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Add an Algorithm subclass to the registry under `cls.name` (usable as a decorator)."""
    ALGORITHMS[cls.name] = cls
    return cls


for _cls in (FedAvg, FedAvgSubgrad, FedMiD, FedMiDOSP, FedDualAvg, FedDualAvgOSP, Local, Centralized):
    register_algorithm(_cls)
for _cls in (FeDualEx, FedMiP, ExtragradLocalSGD, PGDA):
    register_algorithm(_cls)
for _cls in SVRG_FAMILY:  # gd, fsvrg, fsvrg_naive, dane, cocoa_plus
    register_algorithm(_cls)

__all__ = ["ALGORITHMS", "Algorithm", "Hyper", "register_algorithm"]
