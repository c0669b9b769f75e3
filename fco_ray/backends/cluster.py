"""How fco-ray joins Ray: exactly the cluster the user named, or a new private one.

`connect()` is the one way fco-ray starts or joins Ray (the ray backend and the sweep
runner both call it):

- this process is already connected (`ray.is_initialized()`: a Tune trial's worker, a test
  fixture, a script that called `ray.init` itself): that connection is used as it is;
- an address is named (the `address` argument, else the `RAY_ADDRESS` environment
  variable): connect to exactly that cluster, or fail saying so. `"auto"` is refused: it
  asks Ray to join whichever local cluster it finds (possibly another user's);
- otherwise: start a NEW local cluster for this process, even if another one runs on this
  machine (`ray.init(address="local")`; a bare `ray.init()` would join the cluster last
  started here by anyone). It is bound to loopback: Ray's processes (GCS, raylet, agents,
  workers, the Prometheus metrics endpoints) listen on 127.0.0.1 only, the dashboard web UI
  is off, metrics are not collected, workers run at the driver's priority (not 15 nice
  levels below it), only the node processes it uses are started (`LEAN`: no autoscaler or
  log monitor, Ray's minimal API server and dashboard agent), and Ray's token
  authentication stays on (Ray's default for new local clusters). Ray's own log lines stay out of stdout (where `fco-ray run` prints
  its metrics table): workers' output is not forwarded to this process, and Ray's driver
  log shows warnings only, on stderr.

`disconnect(connection)` undoes what `connect` did: ends the cluster it started, or
disconnects from the one it joined; a connection that existed before is left alone.

`reuse()`: one connection for many runs in one process (a context manager, around e.g. a
loop of `fco_ray.run` or `run_grid`). Inside it the cluster stays up between runs, and a
ray backend's actors outlive the backend: `close()` parks them (client state dropped), and
the next ray backend on the same problem (same data and regularizer, by content) with the
same actor settings takes them over instead of shipping the shards and starting actors
again. Leaving the block ends the parked actors and the connection (if it made one).
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass
from typing import Iterator

from ..runtime.errors import ConfigError

LOOPBACK = "127.0.0.1"
#: Ray's options for a new local cluster (see the module docstring for why each).
LOCAL_OPTIONS = {
    "include_dashboard": False,
    "dashboard_host": LOOPBACK,
    "log_to_driver": False,
    "logging_level": logging.WARNING,
    "_node_ip_address": LOOPBACK,
    # worker_niceness: Ray runs its workers (our client actors, Tune's trials) 15 nice
    # levels below the driver by default; on a busy machine the actors doing a round's
    # work then get a fraction of the CPU share of the idle driver waiting for them (on the
    # shared 2-core benchmark machine at load ~20: 2 actors 0.6-0.8x the local backend on
    # E4's MLP, benchmarks/results/ray_scaling.md). 0: the same priority as the driver.
    "_system_config": {"enable_metrics_collection": False, "worker_niceness": 0},
}
#: Start a private one-node cluster with only the Ray processes it uses: no autoscaler
#: monitor (there is nothing to scale: the node is the whole cluster), no log monitor (it
#: forwards workers' output to drivers; `log_to_driver` is off), and the API server and
#: dashboard agent in Ray's minimal mode, the one Ray itself runs when installed without
#: `ray[default]` (no HTTP or gRPC servers: no dashboard, job submission, state API or
#: metrics export, all of which this cluster has off or unused). `ray.init` waits for
#: both of those (the dashboard agent ~4.5 s under load), and every Ray Python process
#: competes for the cores while it starts (benchmarks/results/ray_startup_lean.md).
#: False: Ray's full set.
LEAN = True
#: Options for joining a named cluster (its own processes are configured by whoever
#: started it; these only concern this driver).
JOIN_OPTIONS = {"log_to_driver": False, "logging_level": logging.WARNING}


class ClusterError(RuntimeError):
    """The named Ray cluster cannot be used (unreachable, or not named precisely)."""


@dataclass(frozen=True)
class Connection:
    initialized: bool  # this call connected the process (`disconnect` undoes it)
    started: bool  # this call started a new local cluster (`disconnect` ends it)
    address: str  # the cluster's GCS address, host:port


def check_cluster_fits(trials: dict[str, list[dict]], nodes: list[float], where: str) -> None:
    """ConfigError unless every trial's placement-group bundles (`trials`: a description of
    the trial, e.g. its backend keys -> its bundles [{"CPU": c}, ...]) can be placed on a
    cluster whose nodes have `nodes` CPUs: each bundle on one node, all of them within the
    cluster's CPUs. Tune would otherwise wait for the placement group without end."""
    total, largest = sum(nodes), max(nodes, default=0.0)
    for what, bundles in trials.items():
        need = sum(b.get("CPU", 0.0) for b in bundles)
        biggest = max((b.get("CPU", 0.0) for b in bundles), default=0.0)
        if biggest > largest or need > total:
            raise ConfigError(
                f"a trial ({what}) needs {need:g} CPUs ({len(bundles)} bundles: "
                f"{[b.get('CPU', 0.0) for b in bundles]}, the largest {biggest:g}), but {where} "
                f"has {total:g} CPUs on {len(nodes)} node(s), at most {largest:g} on one; "
                "lower backend.actors, backend.cpus_per_actor or tune.cpus_per_trial, or add nodes")


def new_local_cluster_cpus(address: str | None = None) -> list[float] | None:
    """The CPUs per node of the local cluster `connect(address)` would start: this machine's,
    the most Ray can find there; None where it starts none (it joins the cluster at
    `address` or RAY_ADDRESS, or this process is already connected to Ray)."""
    import sys

    if requested_address(address) is not None:
        return None
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # this process's cluster is used as it is
        return None
    return [float(os.cpu_count() or 1)]


def check_local_cluster(backend) -> None:
    """A backend's client actors (`backend`: its config, `actor_bundles`) must fit the local
    cluster a run would start (it `uses_ray`, `new_local_cluster_cpus`). Else ConfigError
    (exit 2) now, before Ray starts, not after the backend's wait for a placement group that
    can never be granted. (A joined cluster may grow: not checked.)"""
    nodes = new_local_cluster_cpus(backend.address) if backend.uses_ray else None
    if nodes is not None:
        check_cluster_fits({backend.describe(): backend.actor_bundles()}, nodes,
                           "the local Ray cluster (this machine)")


def requested_address(address: str | None = None) -> str | None:
    """The cluster address asked for: `address`, else $RAY_ADDRESS; None for a new local
    cluster ("" and "local" also mean that)."""
    if address is None:
        address = os.environ.get("RAY_ADDRESS")
    address = (address or "").strip()
    if address in ("", "local"):
        return None
    if address == "auto":
        raise ConfigError(
            "Ray address 'auto' (from the address option or RAY_ADDRESS) would join whichever "
            "local Ray cluster is found, possibly another user's; name the cluster instead "
            "(host:port as printed by `ray start --head`, or ray://host:port), or leave it "
            "unset to start a private local cluster")
    return address


def connect(address: str | None = None, *, num_cpus: int | None = None) -> Connection:
    """Connect this process to Ray (see the module docstring). `num_cpus`: CPUs of a new
    local cluster (default: this machine's); ignored when joining a cluster."""
    import ray

    if ray.is_initialized():
        return Connection(False, False, ray.get_runtime_context().gcs_address)
    named = requested_address(address)
    if named is not None:
        _check_listening(named)
        options, context = dict(JOIN_OPTIONS), contextlib.nullcontext()
        if _is_loopback(named):
            # a cluster on this machine's loopback (see docs/sweeps.md: one cluster for many runs):
            # this driver's node IP must be 127.0.0.1 too, or Ray waits for a raylet at the
            # machine's network address that never comes
            options["_node_ip_address"], context = LOOPBACK, _loopback_node()
        try:
            with context:
                ray.init(address=named, **options)
        except (ConnectionError, RuntimeError, ValueError) as e:
            hint = ""
            if _caused_by_authentication(e):
                # Ray enables token auth for an explicitly named cluster only when asked
                hint = ("; the cluster requires token authentication: set RAY_AUTH_MODE=token "
                        "and make its token available (~/.ray/auth_token, RAY_AUTH_TOKEN_PATH "
                        "or RAY_AUTH_TOKEN)")
            raise ClusterError(f"cannot connect to the Ray cluster at {named!r} "
                               f"(from the address option or RAY_ADDRESS): {e}{hint}") from e
        return Connection(True, False, ray.get_runtime_context().gcs_address)
    with _loopback_node(), _lean_node(LEAN):
        ray.init(address="local", num_cpus=num_cpus, **LOCAL_OPTIONS)
    return Connection(True, True, ray.get_runtime_context().gcs_address)


def _is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


#: how long a named cluster address has to accept a connection and answer in gRPC
ANSWER_WAIT_S = 10.0


def _check_listening(address: str, timeout_s: float | None = None) -> None:
    """Fail fast when nothing accepts connections at a host:port or ray://host:port address,
    or what answers there does not speak gRPC: Ray itself retries for many minutes (Ray
    Client about 35 s) before giving up. Other schemes are left to Ray."""
    timeout_s = ANSWER_WAIT_S if timeout_s is None else timeout_s
    target, client = address, address.startswith("ray://")
    if client:
        target = address[len("ray://"):].split("/", 1)[0]
        target = target if target.rpartition(":")[2].isdigit() else f"{target}:10001"
    elif "://" in address:
        return
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterError(f"Ray address {address!r} (from the address option or RAY_ADDRESS) "
                           "is not host:port or ray://host:port")
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    except OSError as e:
        raise ClusterError(f"cannot connect to the Ray cluster at {address!r} (from the "
                           f"address option or RAY_ADDRESS): nothing accepts connections "
                           f"there ({e})") from None
    with connection:
        if os.environ.get("RAY_USE_TLS", "0") in ("0", "", "false"):
            _check_grpc(connection, address, timeout_s, client)


#: HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _check_grpc(connection: socket.socket, address: str, timeout_s: float,
                client: bool = False) -> None:
    """A Ray GCS port (and a Ray Client server, `client`) speaks gRPC (HTTP/2): to a client's
    preface it answers with a SETTINGS frame. Anything else there (a web server, a database, a port that accepts and stays
    silent) would keep `ray.init` retrying for minutes: refuse it within `timeout_s`."""
    why = None
    try:
        connection.settimeout(timeout_s)
        connection.sendall(_H2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
        if len(head) < 9:
            why = "it closed the connection" if not head else f"it answered {head[:40]!r}"
        elif head[3] != 4:  # frame type 4: SETTINGS
            why = f"it answered {head!r}, not HTTP/2"
    except TimeoutError:
        why = f"it did not answer within {timeout_s:g} s"
    except OSError as e:
        why = f"the connection failed ({e})"
    if why is not None:
        port, default = (("a Ray Client server (ray://)", "ray://host:10001 by default") if client
                         else ("a Ray head's GCS port", "port 6379 by default"))
        raise ClusterError(f"the server at {address!r} (from the address option or RAY_ADDRESS) "
                           f"is not a Ray cluster: {port} speaks gRPC, {why}; give the "
                           f"address `ray start --head` printed ({default})")


def _caused_by_authentication(error: BaseException) -> bool:
    """Whether Ray's connection error came from a rejected or missing auth token."""
    seen = 0
    while error is not None and seen < 10:
        if type(error).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(error):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def disconnect(connection: Connection) -> None:
    """Undo `connect`: end the cluster it started, or leave the cluster it joined (which
    keeps running); nothing if the process was already connected before."""
    import ray

    if connection.initialized and ray.is_initialized():
        ray.shutdown()


_REUSE = [0]  # depth of nested `reuse()` blocks


def reusing() -> bool:
    """Whether this process is inside a `reuse()` block (ray backends park their actors)."""
    return _REUSE[0] > 0


@contextlib.contextmanager
def reuse(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Connection]:
    """Connect (as `connect`) for the block, and let ray backends made inside it reuse
    each other's actors (see the module docstring)."""
    connection = connect(address, num_cpus=num_cpus)
    _REUSE[0] += 1
    try:
        yield connection
    finally:
        _REUSE[0] -= 1
        if _REUSE[0] == 0:
            import sys

            backend = sys.modules.get("fco_ray.backends.ray_backend")
            if backend is not None:
                backend.release_parked()
        disconnect(connection)


@contextlib.contextmanager
def _lean_node(lean: bool):
    """Start the new local cluster as LEAN says. `ray.init` has no options for it: the
    monitors are left out through the node parameters it builds (`RayParams.no_monitor`,
    `include_log_monitor`, which Ray's own test clusters set), set on every RayParams made
    while this block runs; the minimal API server and agent are what Ray starts when its
    dashboard dependency check (`ray._private.utils.get_dashboard_dependency_error`, asked
    by the driver while it builds their command lines) reports them missing. Both are
    restored when the block ends (this thread only calls `ray.init` meanwhile)."""
    if not lean:
        yield
        return
    from ray._private import parameter
    from ray._private import utils as ray_utils

    original = parameter.RayParams.__init__
    original_check = ray_utils.get_dashboard_dependency_error

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.no_monitor = True
        self.include_log_monitor = False

    def minimal():
        return ImportError("fco_ray private cluster: Ray's minimal API server and agent")

    parameter.RayParams.__init__ = init
    ray_utils.get_dashboard_dependency_error = minimal
    try:
        yield
    finally:
        parameter.RayParams.__init__ = original
        ray_utils.get_dashboard_dependency_error = original_check


@contextlib.contextmanager
def _loopback_node():
    """Keep a new local cluster on 127.0.0.1 while Ray starts it.

    Ray replaces a node IP of 127.0.0.1 by this machine's network address (so that other
    nodes could reach it) unless `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER` is off; with the
    node IP on loopback, every Ray process binds its ports to loopback only. The variable
    is read when Ray is imported, so it is set both in the environment (for the processes
    Ray starts) and in the already imported constant. Token auth: Ray turns it on for a
    new local cluster when RAY_AUTH_MODE is unset, and warns about it on every start; the
    choice is kept (a user's own RAY_AUTH_MODE too) and that one warning muted."""
    from ray._private import ray_constants

    saved_env = {k: os.environ.get(k) for k in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",)}
    saved_flag = ray_constants.ENABLE_RAY_CLUSTER
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    saved_level = auth_log.level
    auth_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        auth_log.setLevel(saved_level)
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
