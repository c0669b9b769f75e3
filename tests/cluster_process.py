"""A Ray cluster on this machine owned by a fresh interpreter and joined by the test process.

Starting Ray's daemons from a process forks it (Ray starts them with a `preexec_fn`, so
Python runs its at-fork hooks), and once a test has used JAX in that process every fork runs
JAX's hook: "os.fork() was called ... JAX is multithreaded, so this will likely lead to a
deadlock". A process that joins a running cluster forks nothing. So every cluster the tests
start in-process is started here, by `python -m tests.cluster_process HEAD_CPUS` (no JAX in
it: `ray.cluster_utils.Cluster`), and joined; the owner takes one command per line on stdin:

    add CPUS     a worker node; answers the node's index (the head is 0)
    remove I     node I removed at once (every process on it dies); answers "removed"

and shuts the cluster down when stdin closes (the test process ended or called `shutdown`).
Token authentication stays on, as on fco-ray's own local clusters: both sides use
RAY_AUTH_MODE=token and the user's token (Ray makes one at the first start).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _token_mode() -> None:
    """RAY_AUTH_MODE=token in this process, the way `ray.init` sets it for a new local
    cluster: Ray reads the variable into its cached config, which is read again here."""
    os.environ["RAY_AUTH_MODE"] = "token"
    from ray._raylet import Config

    Config.initialize("")


class ClusterProcess:
    """A cluster owned by a helper process (`main` below), joined by this one."""

    def __init__(self, head_cpus: int, **join):
        env = {**os.environ, "RAY_AUTH_MODE": "token"}
        env.pop("RAY_ADDRESS", None)
        # run as a module from the repository's root: run as a script, its folder would come
        # first on sys.path, and tests/ray/ would shadow Ray
        self.owner = subprocess.Popen([sys.executable, "-m", "tests.cluster_process", str(head_cpus)],
                                      cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.address = self._answer()
        import ray

        _token_mode()
        ray.init(address=self.address, **{"log_to_driver": False, **join})

    def _answer(self) -> str:
        line = self.owner.stdout.readline().strip()
        if not line or line.startswith("error"):
            self.shutdown()
            raise RuntimeError(f"the cluster's owner process failed: {line or 'no answer'}")
        return line

    def _ask(self, command: str) -> str:
        self.owner.stdin.write(command + "\n")
        self.owner.stdin.flush()
        return self._answer()

    def add_node(self, num_cpus: int) -> int:
        return int(self._ask(f"add {num_cpus}"))

    def remove_node(self, index: int) -> None:
        self._ask(f"remove {index}")

    def shutdown(self) -> None:
        """This process leaves the cluster, and the owner ends it."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.owner.poll() is None:
            self.owner.stdin.close()
            try:
                self.owner.wait(timeout=60)
            except subprocess.TimeoutExpired:  # an owner that hangs is ended
                self.owner.kill()
                self.owner.wait()


def main(head_cpus: int) -> None:
    """Nodes started as fco-ray starts its own local clusters (`fco_ray.backends.cluster.LEAN`:
    no autoscaler or log monitor, Ray's minimal API server and agent): the clusters users get
    from `fco-ray`, whose daemons also cost less CPU to start and to keep up (the session's
    cluster stays up for most of the suite)."""
    from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled
    from ray.cluster_utils import Cluster

    from fco_ray.backends.cluster import _lean_node

    ensure_token_if_auth_enabled(None, create_token_if_missing=True)  # as `ray.init` does
    with _lean_node(True):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": head_cpus, "include_dashboard": False})
    nodes = [cluster.head_node]
    print(cluster.address, flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        try:
            if command == "add":
                with _lean_node(True):
                    nodes.append(cluster.add_node(num_cpus=int(args[0])))
                cluster.wait_for_nodes()
                print(len(nodes) - 1, flush=True)
            elif command == "remove":
                cluster.remove_node(nodes[int(args[0])], allow_graceful=False)
                print("removed", flush=True)
            else:
                print(f"error: unknown command {line.strip()!r}", flush=True)
        except Exception as e:  # noqa: BLE001 - the test process reads it and raises
            print(f"error: {type(e).__name__}: {e}".replace("\n", " "), flush=True)
    cluster.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]))
