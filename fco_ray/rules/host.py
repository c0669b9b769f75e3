"""A rule's rounds on the host executors, one round at a time: the CPU engine (`backend: local`,
device `auto` or `cpu`) and the Ray actors, which hold the clients and their data.

The engine keeps its round loop (sampling, divergence, evaluation, checkpoints); the rule's
pieces run compiled with JAX on this CPU, for every member of a group at once (`jax.vmap`
over members: the rule itself sees one member):

- where the clients are (the local backend; each Ray actor over its own shard):
  `client_sums`, the sum over the given clients of weight x the rule's client message
  (`jax.vmap` over clients of `jax.vmap` over members, as in `fco_ray.rules.rounds`);
- on the driver: `broadcast`, `server` and the output models.

A `RuleProgram` is compiled for one rule and one problem (its data on the executor). The
executors keep theirs for their lifetime (`Programs`, owned by a backend, an actor or a group):
nothing lives in process-wide caches.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from typing import Callable, NamedTuple

import numpy as np

import jax
import jax.numpy as jnp

from . import numpy_problem
from .problems import Client
from .static import Static

#: (rule, problem rule) pairs whose compiled pieces a process keeps for later runs (`pieces`)
PROGRAMS = 32

#: clients per call are padded to a power of two (weight 0): the shards of Ray actors get a
#: varying number of a round's sampled clients, and each new count would compile anew
MIN_CLIENTS = 4


def padded(count: int) -> int:
    return max(MIN_CLIENTS, 1 << max(0, (count - 1).bit_length()))


def host(tree):
    """JAX arrays as (writable) NumPy arrays, in a dict tree."""
    return jax.tree_util.tree_map(lambda v: np.array(v), tree)


class Compiled(NamedTuple):
    """A rule's pieces compiled for the host executors, on the member axis (`server` also
    gives the next state's broadcast: one compiled call per round on the driver)."""

    broadcast: Callable
    server: Callable
    outputs: Callable
    client_sums: Callable


def compile_pieces(rule, problem_rule) -> Compiled:
    """jax.jit of the rule's pieces under `jax.vmap` over members (and clients)."""

    def client_sums(payload, hyper, seed, rnd, ids, rows, weights, data):
        """sum_c weights[c] * client message, for every member: `jax.vmap` over clients
        (outside) of `jax.vmap` over members (inside): messages (C, G, ...)."""

        def client(payload, hyper, cid, row):  # one member, one client
            size = data["sizes"][row] if "sizes" in data else jnp.int64(0)
            offset = data["offsets"][row] if "offsets" in data else jnp.int64(0)
            me = Client(seed, rnd, cid, size, offset)
            return rule.client(problem_rule, data, payload, {**hyper, "seed": seed}, me)

        clients = jax.vmap(jax.vmap(client, in_axes=(0, 0, None, None)), in_axes=(None, None, 0, 0))
        messages = clients(payload, hyper, ids, rows)
        used = weights > 0  # padding (weight 0) adds nothing, not even a NaN

        def weighted(m):
            w = weights.reshape((-1,) + (1,) * (m.ndim - 1))
            return jnp.sum(jnp.where(used.reshape(w.shape), w * m, 0.0), axis=0)

        return jax.tree_util.tree_map(weighted, messages)

    def server_and_broadcast(state, mean, hyper):
        """The next state and its broadcast, in one call (the next round starts with it)."""
        new = rule.server(problem_rule, state, mean, hyper)
        return new, rule.broadcast(new)

    return Compiled(
        broadcast=jax.jit(jax.vmap(rule.broadcast)),
        server=jax.jit(jax.vmap(server_and_broadcast)),
        outputs=jax.jit(jax.vmap(lambda s, h: (rule.output(problem_rule, s, h),
                                               rule.extra_outputs(problem_rule, s, h)))),
        client_sums=jax.jit(client_sums))


@lru_cache(maxsize=PROGRAMS)
def _shared(rule, problem_rule) -> Compiled:
    return compile_pieces(rule, problem_rule)


def pieces(rule, problem_rule) -> Compiled:
    """The compiled pieces of (rule, problem rule): rules that compare by their settings
    (`fco_ray.rules.static`: every built-in one) share them with every equal pair compiled
    before in this process, the PROGRAMS most recent pairs kept (JAX holds each pair's programs
    for the shapes it has seen); the shared copy holds no problem (`detached`), so no data
    stays alive with it. Other rules (a user's own, a problem's NumPy callbacks) compile for
    their executor alone. Which pieces run changes no number: it saves the compilation."""
    if isinstance(rule, Static) and isinstance(problem_rule, Static):
        return _shared(rule, detached(problem_rule))
    return compile_pieces(rule, problem_rule)


def member_outputs(rule, problem_rule, state: dict, hyper: dict) -> tuple[dict, dict]:
    """ONE member's (output model, extra outputs) as NumPy, from its state and `hyper` (numbers).
    Rules that compare by their settings (every built-in one) run the compiled `outputs` of
    their pieces on a member axis of one: the program a lone run's group compiles anyway, where
    op-by-op calls compiled a program per operation and array shape (an MLP's prox: about 60).
    A rule of the user's own runs op by op: its pieces are compiled per executor, not shared,
    and a copy compiled per call would compile at every call."""
    if not (isinstance(rule, Static) and isinstance(problem_rule, Static)):
        return host((rule.output(problem_rule, state, hyper), rule.extra_outputs(problem_rule, state, hyper)))
    lift = lambda tree: jax.tree_util.tree_map(lambda v: np.asarray(v)[None], tree)  # noqa: E731
    out = pieces(rule, problem_rule).outputs(lift(state), lift(hyper))
    return jax.tree_util.tree_map(lambda v: np.array(v)[0], out)


def detached(problem_rule):
    """A copy of a problem rule without its problem (the traced methods use only its
    settings; `arrays()` gave the data)."""
    out = copy.copy(problem_rule)
    if hasattr(out, "problem"):
        out.problem = None
    return out


class RuleProgram:
    """The compiled pieces of `rule` (an algorithm's one-member rule) on `problem_rule` (the
    problem's, over the data this executor holds). States, payloads and messages carry the
    member axis (G, ...); `hyper` is a dict of (G,) numbers (`Group.rule_hyper`)."""

    def __init__(self, rule, problem_rule):
        self.rule, self.problem_rule = rule, problem_rule
        self.arrays = problem_rule.arrays()  # NumPy: put on JAX's device at the first client call
        self._data = None
        self.compiled = pieces(rule, problem_rule)

    def broadcast(self, state) -> dict:
        return host(self.compiled.broadcast(state))

    def server(self, state, mean, hyper) -> tuple[dict, dict]:
        """(the members' next state, its broadcast)."""
        return host(self.compiled.server(state, mean, hyper))

    def outputs(self, state, hyper) -> tuple[dict, dict]:
        """(the members' output models, their extra outputs by suffix)."""
        return host(self.compiled.outputs(state, hyper))

    def client_sums(self, payload, hyper, seed: int, rnd: int, ids, rows, weights) -> dict:
        """sum_c weights[c] * message of client c (global id ids[c], data row rows[c]), for
        every member: (G, ...) per message block."""
        n = len(rows)
        size = padded(n)
        pad = lambda a: np.concatenate([a, np.repeat(a[:1], size - n)]) if size > n else a  # noqa: E731
        ids = pad(np.asarray(ids, np.uint64))
        rows = pad(np.asarray(rows, np.int64))
        weights = np.concatenate([np.asarray(weights, np.float64), np.zeros(size - n)])
        if self._data is None:
            # a transfer, as the device backend's (jnp.asarray would compile a copy per shape)
            self._data = {k: jax.device_put(np.asarray(v)) for k, v in self.arrays.items()}
        return host(self.compiled.client_sums(payload, hyper, np.uint64(seed), np.uint64(rnd), ids,
                                              rows, weights, self._data))


class Programs:
    """The rule programs an executor has compiled, by (algorithm class, shared settings):
    those of one run or sweep are compiled once and reused by every later round and run on
    the same executor. Owned by that executor (a backend, a Ray actor, a group's driver side)."""

    def __init__(self):
        self.by_key: dict = {}

    def get(self, group, problem) -> RuleProgram:
        """The program of `group`'s rule on `problem` (the data this executor holds). A rule
        that compares by its settings (`Static`: the built-in ones) is its own key; another is
        keyed by its algorithm class and settings (a rule is made from them)."""
        rule = group.rule
        own = rule if isinstance(rule, Static) else (group.cls, group.rule_key())
        key = (own, id(problem))
        if key not in self.by_key:
            problem_rule = numpy_problem.problem_rule(problem, group.hp.minibatch)
            self.by_key[key] = (problem, RuleProgram(rule, problem_rule))  # the problem kept: ids stay unique
        return self.by_key[key][1]

    def clear(self) -> None:
        self.by_key.clear()


def _shapes(tree) -> dict:
    return {jax.tree_util.keystr(path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def check_rule(program: RuleProgram, state, hyper: dict, model_shapes: dict) -> None:
    """Refuse a rule whose pieces do not fit together, before the first round, naming the
    rule's class and method: each method is traced on one member's arrays (`jax.eval_shape`,
    nothing computed); the server must give back the state `init` gave (the same keys, the
    same shapes), and `output` the problem's model."""
    from ..runtime.errors import ConfigError

    rule, problem_rule = program.rule, program.problem_rule
    name = type(rule).__name__

    def trace(method: str, fn, *args):
        try:
            return jax.eval_shape(fn, *args)
        except Exception as e:  # noqa: BLE001 - the user's code: say where it failed
            raise ConfigError(f"rule {name}.{method} fails on one configuration's arrays: "
                              f"{type(e).__name__}: {e}") from None

    def same(method: str, what: str, got, want) -> None:
        got, want = _shapes(got), _shapes(want)
        if got != want:
            missing = sorted(set(want) - set(got))
            extra = sorted(set(got) - set(want))
            shapes = sorted(k for k in set(got) & set(want) if got[k] != want[k])
            parts = ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else []) \
                + [f"{k} has shape {got[k]}, expected {want[k]}" for k in shapes]
            raise ConfigError(f"rule {name}.{method} returns {what} that does not match: "
                              + "; ".join(parts))

    seed = np.uint64(0)
    hyper = {k: np.asarray(v) for k, v in hyper.items()}
    me = Client(seed, np.uint64(0), np.uint64(0), np.int64(1), np.int64(0))
    payload = trace("broadcast", rule.broadcast, state)
    data = {k: jax.ShapeDtypeStruct(np.shape(v), np.asarray(v).dtype) for k, v in program.arrays.items()}
    message = trace("client", lambda p, h, d: rule.client(problem_rule, d, p, {**h, "seed": seed}, me),
                    payload, hyper, data)
    new = trace("server", lambda s, m, h: rule.server(problem_rule, s, m, h), state, message, hyper)
    same("server", f"a state (from the client message {_shapes(message)})", new, state)
    model = trace("output", lambda s, h: rule.output(problem_rule, s, h), state, hyper)
    same("output", "a model", model, {b: jax.ShapeDtypeStruct(s, np.float64) for b, s in model_shapes.items()})


def broadcast(rule, state) -> dict:
    """The members' broadcast (`rule.broadcast` under vmap), compiled: the driver's first piece
    of a round, which needs no problem."""
    if isinstance(rule, Static):
        return host(_shared_broadcast(rule)(state))
    return host(jax.jit(jax.vmap(rule.broadcast))(state))


@lru_cache(maxsize=PROGRAMS)
def _shared_broadcast(rule):
    return jax.jit(jax.vmap(rule.broadcast))
