"""fco-ray: federated composite optimization on Ray, swept with Ray Tune, logged to MLflow."""
from .algorithms import ALGORITHMS, Algorithm, register_algorithm
from .config import ConfigError
from .problems import PROBLEMS, ClientData, Problem, ProblemParams, register_problem

__all__ = ["ALGORITHMS", "PROBLEMS", "Algorithm", "ClientData", "ConfigError", "Problem",
           "ProblemParams", "register_algorithm", "register_problem", "run"]
__version__ = "0.1.0"


def __getattr__(name):
    # `run` pulls in pandas; importing it lazily keeps Ray actor start-up light
    if name == "run":
        from .api import run

        return run
    raise AttributeError(f"module 'fco_ray' has no attribute {name!r}")
