"""The FedAvg task of benchmarks/peer_flower.py in Flower's simulation engine.

Runs inside the benchmark's own virtual environment (benchmarks/.venv-flower, made by
peer_flower.py), which has flwr and NumPy but not fco_ray: the data come in an .npz file
written by peer_flower.py from fco_ray's problem objects, and the result goes to a JSON
file. Flower's Message API: a ServerApp running `flwr.serverapp.strategy.FedAvg.start`,
a ClientApp whose train handler runs K minibatch SGD steps of linear least squares on its
client's data, `flwr.simulation.run_simulation` with one virtual SuperNode per client.

    PYTHONPATH=benchmarks .venv-flower/bin/python -c "import flower_task; flower_task.cli()" \
        DATA.npz OUT.json --rounds 200 --per-round 10 --local-steps 10 --batch-size 10 \
        --client-lr 0.001 --seed 0 --actors 2

Run as the module `flower_task` (not as a script), so that Flower's Ray actors import the
client code by name and keep the loaded data between calls; the task's settings reach the
clients in each round's config record.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
from fco_ray.runtime.files import write_file

ARGS = None  # the command line, in the driver process only
DATA = {}  # path -> task data, loaded once per process (each Flower actor is a process)


def data(path: str) -> dict:
    if path not in DATA:
        with np.load(path) as f:
            DATA[path] = {k: f[k] for k in f.files}
    return DATA[path]


class TimedFedAvg(FedAvg):
    """FedAvg that notes when each round starts (its configure_train call)."""

    starts: list[float] = []

    def configure_train(self, server_round, arrays, config, grid):
        self.starts.append(time.perf_counter())
        return super().configure_train(server_round, arrays, config, grid)


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """K steps of w <- w - lr * grad of scale * mean_b (x_b.w + b - y_b)^2 over B samples
    drawn with replacement from this client's rows (as fco_ray's fedavg does)."""
    cfg = msg.content["config"]
    d = data(str(cfg["data"]))
    cid = int(context.node_config["partition-id"])
    x, y, n = d["x"][cid], d["y"][cid], int(d["sizes"][cid])
    w, b = (a.copy() for a in msg.content["arrays"].to_numpy_ndarrays())
    rng = np.random.default_rng([int(cfg["seed"]), int(cfg["server-round"]), cid])
    lr, batch = float(cfg["client-lr"]), int(cfg["batch-size"])
    g = 2.0 * float(d["loss_scale"]) / batch
    for _ in range(int(cfg["local-steps"])):
        rows = rng.integers(0, n, batch)
        xb, yb = x[rows], y[rows]
        r = xb @ w + b - yb
        w -= lr * g * (r @ xb)
        b -= lr * g * r.sum()
    content = RecordDict({"arrays": ArrayRecord([w, b]),
                          "metrics": MetricRecord({"num-examples": n})})
    return Message(content=content, reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    d = data(ARGS.data)
    clients = len(d["sizes"])
    strategy = TimedFedAvg(fraction_train=ARGS.per_round / clients, fraction_evaluate=0.0,
                           min_train_nodes=ARGS.per_round, min_available_nodes=clients)
    start = [np.zeros(d["x"].shape[-1]), np.zeros(1)]
    config = ConfigRecord({"data": ARGS.data, "seed": ARGS.seed, "client-lr": ARGS.client_lr,
                           "batch-size": ARGS.batch_size, "local-steps": ARGS.local_steps})
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(start),
                            num_rounds=ARGS.rounds, train_config=config)
    ends = time.perf_counter()
    w, b = result.arrays.to_numpy_ndarrays()
    write_file(ARGS.out, json.dumps({"round_starts": TimedFedAvg.starts, "end": ends,
                                     "w": w.tolist(), "b": float(b[0])}))


def cli() -> None:
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--per-round", type=int, default=10)
    p.add_argument("--local-steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--client-lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--actors", type=int, default=2, help="Flower's Ray actors (1 CPU each)")
    ARGS = p.parse_args()
    clients = len(data(ARGS.data)["sizes"])
    # each actor gets one CPU: `--actors` of them on a cluster of that many CPUs
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": ARGS.actors}})


if __name__ == "__main__":
    cli()
