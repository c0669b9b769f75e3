"""Hosts in Linux network namespaces joined by veth pairs: a test's own small network.

`Network` is a switch (a namespace holding a bridge); `network.host(name)` is a context
manager for a host on it: a network namespace with one veth interface (`eth0`) whose other
end is a bridge port, the address the test assigns (10.29.0.<n>/24, nothing else but
loopback), its own home directory (`~/.ray/auth_token` lives there: each host has its own,
as on separate machines) and its own /tmp/ray (commands run in a private mount namespace
with a directory of the test bound there), so Ray nodes on different hosts share nothing
but the file system of the test (the repository copy, the storage, the MLflow database)
and the links. Leaving the block kills every process in the namespace and deletes it.

A host can lose its link (`cut()`: `eth0` down, packets dropped, as a pulled cable) and
get it back (`restore()`), or lose its processes (`kill()`: SIGKILL to every process in
the namespace, which is where everything a command there started runs, Ray's daemons too).

Needs root (`ip netns add`); `unavailable()` says why it cannot run here. Never calls
`ray stop` (it ends every Ray process of the user on the machine, other clusters too).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.29.0"  # the test network: 10.29.0.0/24, inside the test's namespaces only
#: environment variables of the test process that a host does not inherit (a real machine
#: would not have them): the cluster to join, the auth mode, the test's venv and imports
NOT_INHERITED = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                 "VIRTUAL_ENV", "PYTHONPATH", "MLFLOW_TRACKING_URI", "RAY_TMPDIR")


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (ip netns add, veth pairs, mount namespaces)"
    for tool in ("ip", "unshare", "ss"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2 / util-linux) not installed"
    name = f"fcoprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()[-200:]}"
    try:
        veth = subprocess.run(["ip", "-n", name, "link", "add", "a0", "type", "veth", "peer", "name", "b0"],
                              capture_output=True, text=True)
        if veth.returncode != 0:
            return f"cannot create a veth pair: {veth.stderr.strip()[-200:]}"
        mount = subprocess.run(["ip", "netns", "exec", name, "unshare", "--mount", "true"],
                               capture_output=True, text=True)
        if mount.returncode != 0:
            return f"cannot create a mount namespace: {mount.stderr.strip()[-200:]}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Socket:
    """A listening TCP socket: its local address and port, and the process holding it."""
    address: str
    port: int
    process: str
    pid: int

    @property
    def host(self) -> str:
        """The bound address as plain IPv4 where it is one ('::ffff:10.29.0.1' -> '10.29.0.1',
        '*' and '[::]' -> '0.0.0.0': every interface)."""
        a = self.address.strip("[]")
        if a in ("*", "::", "0.0.0.0"):
            return "0.0.0.0"
        return a.removeprefix("::ffff:")


@dataclass
class Host:
    network: "Network"
    name: str
    address: str
    index: int
    root: Path
    env: dict = field(default_factory=dict)

    @property
    def ns(self) -> str:
        return f"{self.network.prefix}{self.name}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def token_file(self) -> Path:
        return self.home / ".ray" / "auth_token"

    def __enter__(self) -> "Host":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create(self) -> None:
        (self.root / "ray").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(parents=True, exist_ok=True)
        _ip("netns", "add", self.ns)
        port = f"p{self.index}"
        _ip("link", "add", port, "netns", self.network.switch, "type", "veth",
            "peer", "name", "eth0", "netns", self.ns)
        _ip("-n", self.network.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", self.ns, "addr", "add", f"{self.address}/24", "dev", "eth0")
        _ip("-n", self.ns, "link", "set", "eth0", "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")

    def environment(self, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        env.update(HOME=str(self.home), PYTHONUNBUFFERED="1", **self.env, **(extra or {}))
        return env

    def command(self, script: str) -> list[str]:
        """argv running bash `script` on this host: in its network namespace, with its own
        /tmp/ray (a private mount namespace; Ray keeps its session, sockets and logs there)."""
        Path("/tmp/ray").mkdir(exist_ok=True)  # the mount point
        prologue = f"set -euo pipefail\nmount --bind {self.root / 'ray'} /tmp/ray\n"
        return ["ip", "netns", "exec", self.ns, "unshare", "--mount", "--propagation", "private",
                "bash", "-c", prologue + script]

    def run(self, script: str, *, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(self.command(script), cwd=cwd, env=self.environment(env),
                              capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"on {self.name} ({self.address}), exit {done.returncode}:\n"
                                 f"{script}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n"
                                 f"{done.stderr[-4000:]}")
        return done

    def popen(self, script: str, *, cwd: Path | None = None, env: dict | None = None,
              log: Path) -> subprocess.Popen:
        """Start `script` in the background, its output (both streams) to `log`."""
        with open(log, "w") as out:
            return subprocess.Popen(self.command(script), cwd=cwd, env=self.environment(env),
                                    stdout=out, stderr=subprocess.STDOUT, text=True)

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def processes(self) -> list[str]:
        """The names (comm) of the processes in this host's namespace."""
        names = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        return names

    def kill(self, timeout: float = 30.0) -> None:
        """SIGKILL every process in this host's namespace (again until none is left: a
        dying process's children may still be starting)."""
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        left = self.pids()
        assert not left, f"processes left in namespace {self.ns}: {left}"

    def cut(self) -> None:
        """Pull the cable: this host's link goes down (packets to and from it are dropped)."""
        _ip("-n", self.ns, "link", "set", "eth0", "down")

    def restore(self) -> None:
        _ip("-n", self.ns, "link", "set", "eth0", "up")

    def listening(self) -> list[Socket]:
        """Every listening TCP socket in this namespace (`ss -ltnpH`), with its process."""
        out = subprocess.run(["ip", "netns", "exec", self.ns, "ss", "-ltnpH"], check=True,
                             capture_output=True, text=True).stdout
        sockets = []
        for line in out.splitlines():
            fields = line.split()
            local = fields[3]
            address, _, port = local.rpartition(":")
            users = re.search(r'users:\(\("([^"]*)",pid=(\d+)', line)
            process, pid = (users.group(1), int(users.group(2))) if users else ("?", -1)
            sockets.append(Socket(address, int(port), process, pid))
        return sockets

    def close(self) -> None:
        if subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True).returncode == 0:
            self.kill()
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        self.network.hosts.pop(self.name, None)


def remove_stale() -> None:
    """Delete the namespaces (and kill their processes) of networks whose test process is
    gone (killed before its finalizers ran): names `fco<pid><host>` with no process <pid>."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (line.split()[0] for line in listing.splitlines() if line.strip()):
        owner = re.fullmatch(r"fco(?:probe)?(\d+)[a-z]*\d*", name)
        if owner is None or Path(f"/proc/{owner.group(1)}").exists():
            continue
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
        for pid in map(int, pids.split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class Network:
    """A bridge in a namespace of its own (the switch); hosts are attached with `host()`."""

    def __init__(self, root: Path | None = None):
        remove_stale()
        self.prefix = f"fco{os.getpid()}"
        self.switch = f"{self.prefix}sw"
        # each host's directory: its home, and what is bound at /tmp/ray (Ray's session
        # and logs: kept with the test's files when `root` is given, e.g. pytest's tmp_path)
        self.own_root = root is None  # a directory of its own, deleted at the end
        self.root = Path(root or tempfile.mkdtemp(prefix="fco-netns-"))
        self.hosts: dict[str, Host] = {}
        self._next = 1
        _ip("netns", "add", self.switch)
        try:
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def host(self, name: str, env: dict | None = None) -> Host:
        """A new host (enter it to create it), at the next free address of the subnet."""
        assert name not in self.hosts, f"host {name} exists"
        index, self._next = self._next, self._next + 1
        host = Host(self, name, f"{SUBNET}.{index}", index, self.root / name, dict(env or {}))
        self.hosts[name] = host
        return host

    def close(self) -> None:
        for host in list(self.hosts.values()):
            host.close()
        subprocess.run(["ip", "netns", "del", self.switch], capture_output=True)
        if self.own_root:
            shutil.rmtree(self.root, ignore_errors=True)
