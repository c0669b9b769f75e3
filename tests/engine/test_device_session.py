"""benchmarks/device_session.sh, the first command on a lent GPU: every part runs under a hard
limit, and the limits of `all` add up to one device command (<= 600 s); the wheels it installs
offline are in the checkout, for the GPU machines' Python 3.12."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_session.sh"


def test_the_session_script_parses_and_its_hard_limits_fit_one_device_command():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    text = SCRIPT.read_text()
    limits = {name: int(s) for name, s in re.findall(r"^\s*limited (\w+) (\d+) ", text, re.M)}
    assert {"setup", "gpu", "l1", "nuclear", "stand_in", "stand_in_nuclear"} <= set(limits)
    assert sum(limits.values()) <= 600, limits
    # every python command of a part runs inside `limited` (a hard timeout), none outside
    for line in text.splitlines():
        if re.search(r"python3 \S*(benchmarks/|gpu_nuclear\.py|gpu_stand_in\.py)", line):
            assert line.strip().startswith(("limited ", "#")), line


def test_the_pydantic_wheels_for_python_312_are_in_the_checkout():
    wheels = sorted(p.name for p in (ROOT / "vendor" / "wheels").glob("*.whl"))
    names = {w.split("-")[0].lower() for w in wheels}
    assert {"pydantic", "pydantic_core", "annotated_types", "typing_inspection"} <= names, wheels
    core = [w for w in wheels if w.startswith("pydantic_core")]
    assert core and all("cp312" in w and "x86_64" in w for w in core), core
