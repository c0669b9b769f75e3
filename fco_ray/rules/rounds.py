"""Whole rounds as one compiled program: `lax.scan` over rounds of `jax.vmap` over members.

A member's round: broadcast; if the broadcast is not finite the member stops (its state is
kept, the round it stopped at recorded: the engine ends it as diverged, as on the CPU);
else each of its sampled clients runs the algorithm's client rule (`jax.vmap` over clients),
the messages are summed with the clients' weights and divided by their total, and the
server rule makes the next state. The sampled clients and their weights of every round come
in as arrays (the host draws them with the CPU engine's sampler), so a member's run equals
its run on the CPU engine; everything else (minibatches, noise) is drawn on the device from
the same keys.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from .problems import Client


def _finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree_util.tree_leaves(tree)]))


def compile_rounds(rule, problem, shared: bool):
    """A jitted `run(state, alive, stopped, hyper, seed, data, rows, weights, rounds)`:
    state, alive (G,), stopped (G,) and hyper (a dict of (G,) numbers) on the member axis;
    rows and weights (R, G, C): the clients of each round and member and their aggregation
    weights; rounds (R,). Returns (state, alive, stopped), stopped[g] the round at which
    member g's broadcast was not finite (-1: running).

    `shared`: the members share the seed, so `seed` is one number and rows / weights are
    (R, C). Then nothing that depends on the seed carries the member axis: each client's
    minibatch is drawn and gathered once per step for all members, and `jax.vmap` turns the
    members' products with it into one matrix product (what a hand-written group step does)."""

    def member_round(state, alive, hyper, seed, data, rows, weights, rnd):
        payload = rule.broadcast(state)
        ok = alive & _finite(payload)
        own = {**hyper, "seed": seed}

        def client(row):
            size = data["sizes"][row] if "sizes" in data else jnp.int64(0)
            offset = data["offsets"][row] if "offsets" in data else jnp.int64(0)
            me = Client(seed, rnd.astype(jnp.uint64), row.astype(jnp.uint64), size, offset)
            return rule.client(problem, data, payload, own, me)

        messages = jax.vmap(client)(rows)
        total = weights.sum()
        mean = {k: jnp.tensordot(weights, m, axes=1) / total for k, m in messages.items()}
        new = rule.server(problem, state, mean, own)
        keep = lambda n, o: jnp.where(ok, n, o)  # noqa: E731
        return jax.tree_util.tree_map(keep, new, state), ok

    per_member = None if shared else 0
    members = jax.vmap(member_round, in_axes=(0, 0, 0, per_member, None, per_member, per_member, None))

    def run(state, alive, stopped, hyper, seed, data, rows, weights, rounds):
        def body(carry, xs):
            state, alive, stopped = carry
            rows_r, weights_r, rnd = xs
            state, ok = members(state, alive, hyper, seed, data, rows_r, weights_r, rnd)
            return (state, ok, jnp.where(alive & ~ok, rnd, stopped)), None

        carry, _ = lax.scan(body, (state, alive, stopped), (rows, weights, rounds))
        return carry

    return jax.jit(run)


def compile_outputs(rule, problem):
    """A jitted `outputs(state, hyper) -> {"": params, suffix: params}` on the member axis:
    each member's output model and extra outputs (for checks against the host's)."""

    def one(state, hyper):
        return {"": rule.output(problem, state, hyper), **rule.extra_outputs(problem, state, hyper)}

    return jax.jit(jax.vmap(one))
