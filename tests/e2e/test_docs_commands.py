"""Every command a docs/ page shows in a ```bash block is run by a test, verbatim where it is
cheap and otherwise in a reduced form (fewer rounds, a tiny problem, a dry mode): the blocks
are read from the pages, so a page that changes a command changes what runs here, and a new
block fails `test_every_docs_command_is_run_by_a_test` until a test runs it.
"""
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import end_process_group

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
BIN = Path(sys.executable).parent


def commands(page: Path) -> list[str]:
    """The commands of a page's ```bash blocks: one per line (a trailing `\\` joins lines),
    comments after `#` dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def page_commands(name: str) -> list[str]:
    return commands(REPO / "docs" / name)


#: where each page's commands run: the test (in this file unless a path is given)
RUN_BY = {
    "benchmarks.md": ["test_the_full_test_command_is_the_one_ci_runs",
                      "test_the_pytest_commands_select_tests"],
    "cluster.md": ["tests/ray/test_netns_cluster.py (the head, worker, job and mlflow server blocks "
                   "on hosts of their own)", "test_the_pytest_commands_select_tests"],
    "gpu.md": ["test_the_gpu_extra_exists", "test_the_device_session_script_parses_and_its_steps_take_its_options"],
    "sweeps.md": ["test_the_sweeps_page_block_runs_reduced"],
}


def test_every_docs_command_is_run_by_a_test():
    with_commands = {p.name for p in DOCS if commands(p)}
    assert with_commands == set(RUN_BY), with_commands ^ set(RUN_BY)
    here = Path(__file__).read_text()
    for tests in RUN_BY.values():
        for test in tests:
            path = test.split(" ")[0]
            assert (REPO / path).exists() if "/" in path else f"def {test}(" in here, test
    # the cluster test reads its commands from the page itself
    assert 'DOC = REPO / "docs" / "cluster.md"' in (REPO / "tests/ray/test_netns_cluster.py").read_text()


def test_the_full_test_command_is_the_one_ci_runs():
    full = [c for c in page_commands("benchmarks.md") if c.endswith("pytest -q")]
    assert full, "docs/benchmarks.md shows the full test command"
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert all(c in ci for c in full), full


@pytest.mark.slow  # collects the whole suite twice in fresh processes
def test_the_pytest_commands_select_tests():
    """Each pytest command of a page (but the whole suite, which CI runs) collects tests: the
    marker expression selects some and leaves some out, a named file exists and collects."""
    shown = [c for p in ("benchmarks.md", "cluster.md") for c in page_commands(p)
             if "-m pytest" in c and not c.endswith("pytest -q")]
    assert len(shown) == 2, shown
    for command in shown:
        argv = shlex.split(command)
        assert argv[0] == ".venv/bin/python", command
        done = subprocess.run([sys.executable, *argv[1:], "--collect-only", "-n", "0"],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        summary = done.stdout.strip().splitlines()[-1]
        collected = re.search(r"(\d+)(?:/\d+)? tests? collected", summary)
        assert collected and int(collected[1]) > 0, (command, summary)
        if "-m" in argv[3:]:  # a marker expression (argv[1:3] is `-m pytest`)
            assert "deselected" in summary, (command, summary)


def test_the_gpu_extra_exists():
    assert page_commands("gpu.md")[0] == "pip install -e '.[gpu]'"
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("jax[cuda") for req in extras["gpu"]), extras["gpu"]


def test_the_device_session_script_parses_and_its_steps_take_its_options():
    """The GPU session runs only on a lent GPU: here it must parse, and every python step it
    calls must exist and accept the options it passes (each script's --help)."""
    command = next(c for c in page_commands("gpu.md") if "device_session.sh" in c)
    script = REPO / shlex.split(command)[1]
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    # each step runs as `limited NAME SECONDS bash -c "python3 SCRIPT ARGS | tail ..."`
    steps = re.findall(r"python3 ((?:benchmarks|results)/\S+\.py) ([^|\n\"]*)", script.read_text())
    assert len(steps) >= 3, steps
    for path, args in steps:
        assert (REPO / path).exists(), path
        helped = subprocess.run([sys.executable, str(REPO / path), "--help"], cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert helped.returncode == 0, (path, helped.stderr[-1000:])
        for option in re.findall(r"(--[\w-]+)", args):
            assert option in helped.stdout, (path, option)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: what makes docs/sweeps.md's commands cheap here: two rounds of a tiny lasso, one seed, two
#: algorithms at one rate pair (appended after the page's own options, so they win)
TINY = ["--set", "problem.clients=4", "--set", "problem.samples_per_client=8", "--set", "problem.dim=16",
        "--set", "problem.support=4", "--set", "problem.val_clients=2", "--set", "rounds=2",
        "--set", "eval_every=1", "--set", "algorithm.clients_per_round=2"]
SWEEP = ["--set", "seeds=[0]", "--set", "algorithms=[feddualavg, fedmid]", "--set",
         "search={grid: {algorithm.client_lr: [0.01], algorithm.server_lr: [1.0]}}"]


@pytest.mark.ray
def test_the_sweeps_page_block_runs_reduced(ray_cluster, workdir, capsys):
    """docs/sweeps.md's block in a new directory: `fco-ray run` and `fco-ray sweep` with TINY
    (and SWEEP) appended, then `runs`, `report` and `--version` as shown, and `fco-ray ui` on a
    free port until the link it prints serves a page."""
    from fco_ray.cli import main

    for folder in ("examples", "sweeps"):
        (workdir / folder).symlink_to(REPO / folder)
    shown = page_commands("sweeps.md")
    assert shown[0].startswith("source .venv/bin/activate")
    ran = []
    for command in shown[1:]:
        argv = shlex.split(command.replace("$PWD", str(workdir)))
        if argv[:2] == ["fco-ray", "ui"]:
            ui_until_its_link_answers(argv, workdir)
            ran.append("ui")
        elif argv[0] == "fco-ray":
            extra = TINY + (SWEEP if argv[1] == "sweep" else []) if argv[1] in ("run", "sweep") else []
            try:
                code = main(argv[1:] + extra)
            except SystemExit as e:  # --version exits through argparse
                code = e.code
            out = capsys.readouterr()
            assert code in (0, None), (command, out.out[-2000:], out.err[-2000:])
            ran.append(argv[1])
        elif argv[:2] == ["mlflow", "ui"]:
            serve_until_a_page(argv, workdir)
            ran.append("mlflow ui")
        else:
            raise AssertionError(f"docs/sweeps.md: no way to run {command!r} here")
    assert ran == ["run", "sweep", "runs", "report", "ui", "--version"], ran
    assert (workdir / "reports" / "e1_lasso").is_dir()


def ui_until_its_link_answers(argv: list[str], workdir: Path) -> None:
    """`fco-ray ui NAME` as a command on a free port: it prints the link once the UI answers;
    the link then serves a page. Ended with the server it started (its process group)."""
    proc = subprocess.Popen([str(BIN / "fco-ray"), *argv[1:], "--port", str(free_port())], cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:  # until the link (the command then runs until Ctrl-C)
            lines.append(line)
            if line.strip().startswith("http://127.0.0.1:"):
                break
        link = lines[-1].strip() if lines else ""
        assert link.startswith("http://127.0.0.1:"), "".join(lines)[-2000:]
        with urllib.request.urlopen(link, timeout=120) as r:  # a busy machine answers slowly
            assert r.status == 200 and "<html" in r.read(2000).decode(errors="replace").lower()
    finally:
        end_process_group(proc)


def serve_until_a_page(argv: list[str], workdir: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([str(BIN / "mlflow"), *argv[1:], "--port", str(port)], cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its server workers in its own group
    try:
        deadline, page = time.monotonic() + 120, None
        while page is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    page = (r.status, r.read(2000).decode(errors="replace"))
            except OSError:
                time.sleep(0.5)
        assert page is not None, (proc.poll(), proc.stderr.read()[-2000:] if proc.poll() is not None else "")
        assert page[0] == 200 and "<html" in page[1].lower(), page
    finally:  # the server and the workers it started, by the group of the process started here
        end_process_group(proc)
