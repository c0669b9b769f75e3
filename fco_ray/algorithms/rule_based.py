"""Algorithms written as their rule alone (`fco_ray.rules`; docs/custom_rules.md).

A `RuleAlgorithm` subclass names its hyperparameters (`Hyper`) and its one-member rule
(`rule`: a class with `init`, `broadcast`, `client`, `server` and `output`, in JAX). Its
rounds run where rules run: on a device backend (`backend: {name: local, device: jax-cpu}` on
this CPU, or `cuda`), alone or fused over its real-valued hyperparameters, lam and (where the
data allows) seeds. The host needs only the initial state and the output model, which it
takes from the same rule.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from .base import Algorithm


def host(tree):
    """JAX arrays as NumPy arrays (a dict tree)."""
    if isinstance(tree, dict):
        return {k: host(v) for k, v in tree.items()}
    return np.asarray(tree)


class RuleAlgorithm(Algorithm):
    fusable = True
    #: its update rules exist only as the rule: it runs on a device backend
    rule_only: ClassVar[bool] = True

    def _hyper(self, problem) -> tuple:
        rule_problem = problem.make_rule(getattr(self.hp, "batch_size", None))
        if rule_problem is None:
            raise TypeError(f"problem {problem.name!r} declares no rule: algorithm {self.name!r} "
                            "is written as a rule and needs one (Problem.rule)")
        hyper = {f: np.float64(getattr(self.hp, f)) for f in self.hp.real_fields()}
        return rule_problem, {**hyper, "lam": np.float64(rule_problem.lam)}

    def server_init(self, problem, params0):
        return host(self.make_rule().init(params0))

    def output(self, problem, state):
        rule_problem, hyper = self._hyper(problem)
        return host(self.make_rule().output(rule_problem, state, hyper))

    def extra_outputs(self, problem, state):
        rule_problem, hyper = self._hyper(problem)
        return host(self.make_rule().extra_outputs(rule_problem, state, hyper))

    def _device_only(self, *args, **kwargs):
        raise TypeError(f"algorithm {self.name!r} is written as a rule: it runs on a device "
                        "backend (backend: {name: local, device: jax-cpu} or cuda)")

    broadcast = client_update = server_update = _device_only
