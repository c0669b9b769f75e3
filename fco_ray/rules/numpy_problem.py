"""A problem without a rule of its own, as a rule: its NumPy methods called back from the
compiled program (`jax.pure_callback`).

Every algorithm is defined by its rule (`fco_ray.rules.algorithms`), so every problem it runs
on must answer a rule's questions (a client's gradient, psi's prox). A problem class that
declares a rule (`Problem.rule`) answers them in JAX; any other (a custom problem written in
NumPy, a subclass that changes the gradient, a psi block the JAX rules do not know) answers
through this wrapper, which calls the problem's own NumPy methods on the host:

- `grad`: `problem.grad(params, rows, Key(seed, round, ids, step, stream), batch_size)`, the
  problem's minibatch gradient (or saddle operator) with its own keyed draws: the rule's
  numbers are the NumPy problem's, whatever it computes;
- `prox` / `project` / `subgradient`: psi's JAX blocks where `psi_blocks` knows them, else the
  NumPy `problem.psi`'s (with the member's own lam).

The callbacks take the whole batch of a `jax.vmap` (clients x members) at once
(`vmap_method="broadcast_all"`): one NumPy call per local step for all of a round's clients
and members, as the problem's stacked methods expect. A GPU runs them on its host, slowly:
the device backends require a problem with a rule of its own (`fco_ray.core.checks`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..ops.random import Key
from .problems import Client, psi_blocks, psi_lam, sample_table
from .psi import Block


def _flat(tree: dict, lead: tuple, shapes: dict) -> dict:
    """Blocks batched with leading axes `lead` (or none) as (N, *shape) rows."""
    n = int(np.prod(lead)) if lead else 1
    return {b: np.asarray(v).reshape((n,) + tuple(shapes[b])) for b, v in tree.items()}


def problem_rule(problem, batch_size: int | None):
    """The rule every executor runs for `problem`: its own (`Problem.make_rule`), else its
    NumPy methods as one (`NumpyProblem`)."""
    own = problem.make_rule(batch_size)
    return NumpyProblem(problem, batch_size) if own is None else own


class NumpyProblem:
    """The rule of `problem` from its NumPy methods (module docstring); `batch_size` None:
    every row of the client."""

    def __init__(self, problem, batch_size: int | None):
        self.problem, self.batch = problem, batch_size
        self.shapes = {b: tuple(s) for b, s in problem.shapes.items()}
        self.lam = psi_lam(problem.psi) if hasattr(problem.psi, "regs") else 0.0
        blocks = psi_blocks(problem.psi) if hasattr(problem.psi, "regs") else None
        self.blocks = None if blocks is None else {b: blocks.get(b, Block(None)) for b in self.shapes}

    def arrays(self) -> dict:
        return sample_table(self.problem)  # the clients' sizes and row offsets (row = offset / max)

    def _out(self, params) -> dict:
        return {b: jax.ShapeDtypeStruct(jnp.shape(v), jnp.result_type(float)) for b, v in params.items()}

    # ---- the client's gradient ----------------------------------------------------------
    def grad(self, data, params, client: Client, k, stream):
        rows = client.offset // max(1, self.problem.train.max_samples)

        def host(params, seed, rnd, ids, rows, step, stream):
            lead = np.shape(ids)
            flat = _flat(params, lead, self.shapes)
            ids, rows = np.asarray(ids, np.uint64).reshape(-1), np.asarray(rows, np.int64).reshape(-1)
            seed, rnd = np.asarray(seed).reshape(-1), np.asarray(rnd).reshape(-1)
            step, stream = np.asarray(step).reshape(-1), np.asarray(stream).reshape(-1)
            out = {b: np.empty_like(v) for b, v in flat.items()}
            # rows sharing the key's scalar parts (seed, round, step, stream) draw in one call
            parts = np.stack([seed, rnd, step, stream], axis=1) if len(seed) > 1 else None
            groups = [np.arange(len(ids))] if parts is None or (parts == parts[0]).all() else \
                [np.flatnonzero((parts == p).all(axis=1)) for p in np.unique(parts, axis=0)]
            for sel in groups:
                key = Key(int(seed[sel[0]]), int(rnd[sel[0]]), ids[sel], int(step[sel[0]]), int(stream[sel[0]]))
                g = self.problem.grad({b: v[sel] for b, v in flat.items()}, rows[sel], key, self.batch)
                for b in out:
                    out[b][sel] = g[b]
            return {b: v.reshape(lead + self.shapes[b]) for b, v in out.items()}

        return jax.pure_callback(host, self._out(params), params, client.seed, client.round, client.id,
                                 rows, k, stream, vmap_method="broadcast_all")

    # ---- psi --------------------------------------------------------------------------------
    def _psi(self, method: str, params, *numbers):
        """psi's NumPy `method` on params, with (t, lam) per row where given."""

        def host(params, *numbers):
            lead = np.shape(numbers[-1]) if numbers else ()
            if not numbers:  # project: the rows are the leading axes beyond the blocks' own
                first = next(iter(params))
                lead = np.shape(params[first])[:np.ndim(params[first]) - len(self.shapes[first])]
            flat = _flat(params, lead, self.shapes)
            values = [np.asarray(v, float).reshape(-1) for v in numbers]
            n = len(next(iter(flat.values())))
            out = {b: np.empty_like(v) for b, v in flat.items()}
            lams = values[-1] if method != "project" else np.full(n, self.lam)
            for lam in np.unique(lams):
                sel = np.flatnonzero(lams == lam)
                psi = self.problem.with_lam(float(lam)).psi if lam != self.lam else self.problem.psi
                rows = {b: v[sel] for b, v in flat.items()}
                for i, row in enumerate(sel):  # one row at a time: psi's t is a number
                    one = {b: v[i] for b, v in rows.items()}
                    if method == "prox":
                        res = psi.prox(one, float(values[0][row]))
                    elif method == "subgradient":
                        res = psi.subgradient(one)
                    else:
                        res = psi.project(one)
                    for b in out:
                        out[b][row] = res[b]
            return {b: v.reshape(tuple(lead) + self.shapes[b]) for b, v in out.items()}

        return jax.pure_callback(host, self._out(params), params, *numbers, vmap_method="broadcast_all")

    def prox(self, params, t, lam):
        if self.blocks is not None:
            return {b: self.blocks[b].prox(x, t * lam) for b, x in params.items()}
        return self._psi("prox", params, jnp.asarray(t, float), jnp.asarray(lam, float))

    def project(self, params):
        if self.blocks is not None:
            return {b: self.blocks[b].project(x) for b, x in params.items()}
        return self._psi("project", params)

    def subgradient(self, params, lam):
        if self.blocks is not None:
            return {b: self.blocks[b].subgradient(x, lam) for b, x in params.items()}
        return self._psi("subgradient", params, jnp.asarray(lam, float))
