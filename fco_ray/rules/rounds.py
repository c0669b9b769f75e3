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


def compile_rounds(rule, problem, shared: bool, metrics=None):
    """A jitted `run(state, alive, stopped, hyper, seed, data, metric_data, rows, weights,
    rounds)`: state, alive (G,), stopped (G,) and hyper (a dict of (G,) numbers) on the member
    axis; rows and weights (R, G, C): the clients of each round and member and their
    aggregation weights; rounds (R,). Returns (state, alive, stopped, rows), stopped[g] the
    round at which member g's broadcast was not finite (-1: running), and rows (G, M) each
    member's metrics after the last round (`member_metrics`; None without `metrics`).

    `metrics`: the problem's `MetricRule` (`fco_ray.rules.metrics`), which reads
    `metric_data`: the metrics of the rule's output model and of its extra outputs (suffixed
    on the host, in the order of `rule.extra_outputs`) are computed in the same program.

    `shared`: the members share the seed, so `seed` is one number and rows / weights are
    (R, C). Then nothing that depends on the seed carries the member axis: each client's
    minibatch is drawn and gathered once per step for all members, and `jax.vmap` turns the
    members' products with it into one matrix product (what a hand-written group step does)."""

    member = None if shared else 0  # the axis of the seed and the sampled clients

    def client(payload, hyper, seed, row, data, rnd):  # one member, one client
        size = data["sizes"][row] if "sizes" in data else jnp.int64(0)
        offset = data["offsets"][row] if "offsets" in data else jnp.int64(0)
        me = Client(seed, rnd.astype(jnp.uint64), row.astype(jnp.uint64), size, offset)
        return rule.client(problem, data, payload, {**hyper, "seed": seed}, me)

    # clients outside, members inside: a client's rows, drawn once where the members share
    # the seed, meet all members' models at once (messages (C, G, ...))
    clients = jax.vmap(jax.vmap(client, in_axes=(0, 0, member, member, None, None)),
                       in_axes=(None, None, None, 0 if shared else 1, None, None))

    def server(state, alive, payload, mean, hyper, seed):  # one member
        ok = alive & _finite(payload)
        new = rule.server(problem, state, mean, {**hyper, "seed": seed})
        return jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new, state), ok

    servers = jax.vmap(server, in_axes=(0, 0, 0, 0, 0, member))

    def one_round(state, alive, hyper, seed, data, rows, weights, rnd):
        payload = jax.vmap(rule.broadcast)(state)
        messages = clients(payload, hyper, seed, rows, data, rnd)
        if shared:  # weights (C,): one weighted sum over clients for every member
            mean = {k: jnp.tensordot(weights, m, axes=1) / weights.sum() for k, m in messages.items()}
        else:  # weights (G, C): each member its own clients' weights
            total = weights.sum(axis=1)
            mean = {k: jnp.einsum("gc,cg...->g...", weights, m) / total.reshape((-1,) + (1,) * (m.ndim - 2))
                    for k, m in messages.items()}
        return servers(state, alive, payload, mean, hyper, seed)

    def run(state, alive, stopped, hyper, seed, data, metric_data, rows, weights, rounds):
        def body(carry, xs):
            state, alive, stopped = carry
            rows_r, weights_r, rnd = xs
            state, ok = one_round(state, alive, hyper, seed, data, rows_r, weights_r, rnd)
            return (state, ok, jnp.where(alive & ~ok, rnd, stopped)), None

        state, alive, stopped = lax.scan(body, (state, alive, stopped), (rows, weights, rounds))[0]
        if metrics is None:
            return state, alive, stopped, None
        table = jax.vmap(member_metrics(rule, problem, metrics), in_axes=(0, 0, None))(state, hyper, metric_data)
        return state, alive, stopped, table

    return jax.jit(run)


def member_metrics(rule, problem, metrics):
    """`f(state, hyper, metric_data)` -> one member's metrics (M,): those of the rule's
    output model, then of each extra output (`rule.extra_outputs`, in its order)."""

    def f(state, hyper, metric_data):
        lam = hyper["lam"]
        parts = [metrics(metric_data, rule.output(problem, state, hyper), lam)]
        parts += [metrics(metric_data, params, lam) for params in rule.extra_outputs(problem, state, hyper).values()]
        return jnp.concatenate(parts)

    return f
