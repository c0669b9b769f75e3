"""Update rules written once: pure JAX functions of ONE member's arrays.

An algorithm's rule (`fco_ray.rules.algorithms`) says what one configuration does in a round:
`broadcast(state)`, `client(problem, data, payload, hyper, client)` for one client, and
`server(problem, state, mean, hyper)`; a problem's rule (`fco_ray.rules.problems`) gives the
client's stochastic gradient or saddle operator and the prox / projection of psi for one
model. The hyperparameters that may differ between the members of a fused group (client and
server rates, lam, the seed) come in as arrays in `hyper` (optax's `inject_hyperparams`
idea), so the same code runs for a group under `jax.vmap` over members and never knows how
many there are (`fco_ray.rules.rounds`, which compiles whole rounds with `lax.scan`).

The random draws are the CPU engine's keyed draws (`fco_ray.rules.keys`), so a member's
rows equal its run on the NumPy engine (tests/engine/test_device.py, 1e-9 relative).

Importing this package imports JAX; configuration checks never do (`Algorithm.rule` and
`Problem.rule` import it when a device backend is made).
"""
import jax

jax.config.update("jax_enable_x64", True)  # every rule computes in float64, as the CPU engine
