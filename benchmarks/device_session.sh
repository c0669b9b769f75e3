#!/usr/bin/env bash
# One lent GPU session, prepared: equality and timings (benchmarks/gpu.py), then the FeDualEx
# paper's E5 protocol in resumable chunks (benchmarks/e5_protocol.py), each under its own time
# limit so that a 10-minute command and a 15-minute device budget hold. Run from the checkout:
#
#     bash benchmarks/device_session.sh OUT [gpu|l1|nuclear|all]   (default all)
#
# The GPU machines have numpy, scipy, numba, pandas, pyyaml and jax but not pydantic: bring its
# wheels with the working tree (`pip download pydantic filelock -d vendor/wheels` on a machine
# with the package index, then carry vendor/wheels); they are installed from there, offline.
# A rerun with the same OUT resumes: e5_protocol.py skips the groups its CSV already holds.
set -euo pipefail
out=${1:?usage: device_session.sh OUT [gpu|l1|nuclear|all]}
part=${2:-all}
cd "$(dirname "$0")/.."
mkdir -p "$out"
python3 -c "import pydantic" 2>/dev/null || python3 -m pip install -q --no-index --find-links vendor/wheels pydantic filelock
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
