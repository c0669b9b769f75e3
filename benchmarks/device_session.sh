#!/usr/bin/env bash
# One lent GPU session, prepared: equality and timings (benchmarks/gpu.py), then the FeDualEx
# paper's E5 protocol in resumable chunks (benchmarks/e5_protocol.py), each under its own time
# limit so that a 10-minute command and a 15-minute device budget hold. Run from the checkout:
#
#     bash benchmarks/device_session.sh OUT [gpu|l1|nuclear|all]   (default all)
#
# The GPU machines have numpy, scipy, numba, pandas, pyyaml, filelock and jax (Python 3.12) but
# not pydantic: bring its wheels, built for that Python, with the working tree, from a machine
# with the package index (versions: this checkout's `pip list`), then carry vendor/wheels:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d vendor/wheels \
#     pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
# They are installed from there, offline. They have no ray or mlflow: the tests that need them fail there.
# A rerun with the same OUT resumes: e5_protocol.py skips the groups its CSV already holds.
set -euo pipefail
out=${1:?usage: device_session.sh OUT [gpu|l1|nuclear|all]}
part=${2:-all}
cd "$(dirname "$0")/.."
mkdir -p "$out"
python3 -c "import pydantic" 2>/dev/null || python3 -m pip install -q --no-index --no-deps vendor/wheels/*.whl
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/device.txt" 2>&1 || true
if [[ $part == gpu || $part == all ]]; then
  python3 benchmarks/gpu.py --out "$out/bench" --time-limit 240 | tail -40
fi
if [[ $part == l1 || $part == all ]]; then
  python3 benchmarks/e5_protocol.py --problem l1 --out "$out/e5" --ks 10,1 --time-limit 200 | tail -15
fi
if [[ $part == nuclear || $part == all ]]; then
  python3 benchmarks/e5_protocol.py --problem nuclear --out "$out/e5" --ks 10,1 --time-limit 250 | tail -15
fi
