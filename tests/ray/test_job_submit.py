"""End to end: the README's cluster commands, verbatim, on a copy of the repository.

The test reads the fenced block that follows the marker `<!-- tests/ray/test_job_submit.py -->`
in README.md and runs it line by line with bash in the copy (tracked and new files, no
build products; `.venv` is this environment), so README and test cannot drift. Those
commands use Ray's default ports, so they run in namespaces of their own (`unshare`:
network, PIDs, mounts, with a private /tmp/ray): other Ray clusters on the machine do not
collide with the head, and every process the block started ends with it. Inside, before
the block, a second ("another project's") Ray head is started: the block's last line must
end the README's cluster and only it. While the README's head runs, `ss -ltnp` lists every
listening socket of the namespace: each must be on loopback. Needs root (CI runs as root);
skips with the reason otherwise.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import fco_ray

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(fco_ray.__file__).resolve().parents[1]
MARKER = "<!-- tests/ray/test_job_submit.py -->"


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    assert MARKER in text, f"README.md lost the marker {MARKER}"
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARKER):], re.S)
    lines = [line.split("  #")[0].rstrip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def isolation_available() -> str | None:
    """Why the namespaces cannot be made here (None: they can)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) not installed"
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "--mount", "true"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot create namespaces: {probe.stderr.strip()[-200:]}"


def copy_repository(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for name in files:
        src = REPO / name
        if src.is_file() and not src.is_symlink() and name != ".venv":
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(Path(sys.prefix))  # the environment these tests run in


def test_readme_cluster_commands_verbatim(tmp_path):
    reason = isolation_available()
    if reason:
        pytest.skip(reason)
    commands = readme_commands()
    assert commands[0] == "source .venv/bin/activate"
    assert any(c.startswith("ray start --head") for c in commands)
    submit = next(c for c in commands if "ray job submit" in c)
    clone = tmp_path / "clone"
    clone.mkdir()
    copy_repository(clone)
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    Path("/tmp/ray").mkdir(exist_ok=True)  # the mount point of the private /tmp/ray
    stop = commands[-1]
    assert stop.startswith("kill ") and "ray stop" not in commands  # only this cluster ends
    during, after = tmp_path / "ss_during.txt", tmp_path / "ss_after.txt"
    # another Ray cluster in the namespace (its own ports; no job server): must survive the block
    other = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address 127.0.0.1 "
             f"--port {OTHER_PORT} --dashboard-port 8400 --ray-client-server-port 20400 "
             "--dashboard-agent-listen-port 52400 --include-dashboard=false --num-cpus 0 > /dev/null")
    script = "\n".join([
        "set -euo pipefail", "ip link set lo up", f"mount --bind {ray_tmp} /tmp/ray",
        f"export PATH={Path(sys.prefix) / 'bin'}:$PATH",
        # Ray gives a head 30 s to register its raylet: on a loaded machine, try again
        f"for i in 1 2 3; do {other} && break; ray stop --force > /dev/null 2>&1; [ $i != 3 ]; done",
        f"cd {clone}",
        *(f"echo '+ {c}'\n" + (f"ss -ltnpH > {during}\n" if c == stop else "") + c for c in commands),
        # the head's reaper ends the GCS and raylet at once; its dashboard (8265) and client
        # server (10001) exit when they lose the GCS, seconds later on a loaded machine
        f"for i in $(seq 90); do ss -ltnH | grep -qE ':(6379|8265|10001) ' || break; sleep 1; done",
        f"ss -ltnpH > {after}"])
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "VIRTUAL_ENV")}
    done = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "--mount",
                           "bash", "-c", script], env=env, capture_output=True, text=True, timeout=1200)
    output = done.stdout + done.stderr
    head_log = Path(os.environ.get("TMPDIR", "/tmp")) / "fco-ray-head.log"  # where the README sends it
    assert done.returncode == 0, output[-6000:] + (head_log.read_text()[-3000:] if head_log.is_file() else "")
    assert "succeeded" in output and re.search(r"\[(\d+)/\1\] ", output), output[-6000:]

    # the runs are in the store the README names ($PWD/mlflow.db), not in the job's copy
    sweep_file = next(w for w in submit.split() if w.endswith(".yaml"))
    name = yaml.safe_load((clone / sweep_file).read_text())["name"]
    assert (clone / "mlflow.db").is_file() and (clone / "ray_results" / name).is_dir()
    from fco_ray.tracking.queries import children, find_parent
    from fco_ray.tracking.store import Store

    store = Store(f"sqlite:///{clone / 'mlflow.db'}")
    parent = find_parent(store, store.experiment_id(name, create=False), name)
    assert parent.info.status == "FINISHED"
    runs = children(store, parent)
    assert runs and all(r.data.tags["fco.status"] in ("finished", "diverged") for r in runs)
    assert all("mean.f1" in r.data.metrics for r in runs if r.data.tags["fco.status"] == "finished")
    assert sorted(r.data.tags["fco.rank"] for r in runs) == [f"{i:04d}" for i in range(1, len(runs) + 1)]
    # the sweep's closing lines name the next commands and the trials' page in the MLflow UI
    assert f"fco-ray runs {name} --best --tracking-uri sqlite:///{clone}/mlflow.db" in output
    assert f"#/experiments/{parent.info.experiment_id}/runs?workflowType=machine_learning" in output
    # `fco-ray runs NAME --best` (the README's next line) printed the best table, and the
    # verdict named the winner
    assert f"sweep {name}: parent run {parent.info.run_id} (FINISHED)" in output
    assert "verdict: feddualavg wins on final f1" in output
    # `fco-ray report NAME` put the report where the user looks: the repository's reports/
    assert (clone / "reports" / name / "index.html").is_file()

    # loopback only, in fact: every socket listening while the README's head ran
    sockets = listening(during.read_text())
    assert {6379, 8265} <= {port for _, port, _ in sockets}, sockets
    assert [s for s in sockets if s[0] not in LOOPBACK] == [], sockets
    # its last line ended the README's cluster, and only it: the other head still listens
    ports = {port for _, port, _ in listening(after.read_text())}
    assert OTHER_PORT in ports and not {6379, 8265, 10001} & ports, after.read_text()


OTHER_PORT = 6400
LOOPBACK = ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]")


def listening(ss: str) -> list[tuple[str, int, str]]:
    """(address, port, process) of each line of `ss -ltnpH`."""
    out = []
    for line in ss.splitlines():
        fields = line.split()
        address, _, port = fields[3].rpartition(":")
        out.append((address, int(port), " ".join(fields[5:])))
    return out
