"""The centralized baseline: FISTA on the pooled training data, one iteration per round."""
from __future__ import annotations

from ..ops.tree import copy
from .base import Algorithm, Hyper
from .solvers import FistaState, fista_step, initial_step


class Centralized(Algorithm):
    """Deterministic accelerated proximal gradient on all training data (no clients, no
    communication; the step comes from a Lipschitz estimate and backtracking, so the
    learning rates are ignored)."""

    name = "centralized"
    uses_clients = False
    Hyper = Hyper  # no rates, steps or batches: FISTA's step comes from the problem

    def server_init(self, problem, params0):
        return {"fista": FistaState(copy(params0), copy(params0), 1.0, initial_step(problem, params0))}

    def broadcast(self, state):
        return {}

    def client_update(self, problem, payload, rows, key):
        return {}

    def server_update(self, problem, state, mean, rnd):
        return {"fista": fista_step(problem, state["fista"])}

    def output(self, problem, state):
        return state["fista"].x
