"""Algorithms written as their rule alone (`fco_ray.rules`; docs/custom_rules.md).

A `RuleAlgorithm` subclass names its hyperparameters (`Hyper`) and its one-member rule
(`rule`: a class with `init`, `broadcast`, `client`, `server` and `output`, in JAX). It runs
on every executor, alone or fused over its real-valued hyperparameters and lam: the CPU
engine (`device: auto` or `cpu`) and Ray actors round by round (`fco_ray.rules.host`), and a
device backend (`jax-cpu`, `cuda`) as whole compiled rounds, fused over seeds too where the
data allows. Its groups are `fco_ray.core.group.RuleGroup`s, which run the rule under
`jax.vmap` over members; this class holds what one configuration needs on the host (its
initial state and output model, from the same rule).
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
    #: its update rules exist only as the rule (its groups: `RuleGroup`)
    rule_only: ClassVar[bool] = True

    def _hyper(self, problem) -> tuple:
        from ..rules.numpy_problem import problem_rule  # JAX: when a run starts

        rule_problem = problem_rule(problem, self.hp.minibatch)
        hyper = {f: np.float64(getattr(self.hp, f)) for f in self.hp.real_fields()}
        return rule_problem, {**hyper, "lam": np.float64(rule_problem.lam)}

    def server_init(self, problem, params0):
        return host(self.make_rule().init(params0))

    def output(self, problem, state):
        return self._outputs(problem, state)[0]

    def extra_outputs(self, problem, state):
        return self._outputs(problem, state)[1]

    def _outputs(self, problem, state) -> tuple[dict, dict]:
        from ..rules.host import member_outputs

        rule_problem, hyper = self._hyper(problem)
        return member_outputs(self.make_rule(), rule_problem, state, hyper)

    def _rule_only(self, *args, **kwargs):
        raise TypeError(f"algorithm {self.name!r} is written as a rule: its rounds run in a "
                        "group (fco_ray.core.group.RuleGroup), which compiles the rule")

    broadcast = client_update = server_update = _rule_only
