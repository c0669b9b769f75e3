"""fco-ray: federated composite optimization on Ray, swept with Ray Tune, logged to MLflow."""
from importlib import import_module

from .runtime.errors import ConfigError
from .runtime.xla import screen as _screen_xla_flags

_screen_xla_flags()  # before any module loads JAX: XLA_FLAGS that abort it are removed (runtime/xla.py)

__all__ = ["ALGORITHMS", "PROBLEMS", "Algorithm", "ClientData", "ConfigError", "Problem",
           "ProblemParams", "RuleAlgorithm", "register_algorithm", "register_problem", "regularizers",
           "run", "run_grid"]
__version__ = "0.1.0"

# Imported on first use: `import fco_ray` (the CLI, a Ray worker) must not pay for numba,
# scipy and pandas before it needs them (`fco-ray --version` or a missing file: ~0.2 s).
_LAZY = {"ALGORITHMS": ".algorithms", "Algorithm": ".algorithms", "register_algorithm": ".algorithms",
         "RuleAlgorithm": ".algorithms.rule_based",
         "PROBLEMS": ".problems", "ClientData": ".problems", "Problem": ".problems",
         "ProblemParams": ".problems", "register_problem": ".problems", "run": ".api",
         "run_grid": ".core.grid"}
#: public modules of the API for custom problems (`from fco_ray import regularizers as R`)
_MODULES = {"regularizers": ".ops.regularizers"}


def __getattr__(name):
    if name in _MODULES:
        value = import_module(_MODULES[name], __name__)
        globals()[name] = value
        return value
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module 'fco_ray' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY, *_MODULES])
