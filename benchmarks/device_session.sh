#!/usr/bin/env bash
# One lent GPU session, prepared: equality and timings (benchmarks/gpu.py) with the anchors'
# stand-ins beside them, then the FeDualEx paper's E5 protocol in resumable chunks
# (results/e5_protocol.py). Every part has a hard limit (`timeout`), so that `all` fits one
# device command (600 s) and a 15-minute device budget leaves time for a second call. Run from
# the checkout:
#
#     bash benchmarks/device_session.sh OUT [gpu|l1|nuclear|all] [ANCHORS]   (default all)
#
# ANCHORS: a folder holding the stand-ins gpu_stand_in.py and gpu_nuclear.py (../shared/anchors
# on the development machine). Only the working tree and the ignored folders carried with it
# reach a GPU machine, so copy them into an ignored folder and carry it:
#     mkdir -p build/anchors && cp ../shared/anchors/gpu_stand_in.py ../shared/anchors/gpu_nuclear.py build/anchors/
#     (run tool: carry ["build/anchors"]; default ANCHORS: build/anchors, else ../shared/anchors)
# Without them the `gpu` part runs benchmarks/gpu.py alone and says so in OUT/anchors.txt.
#
# Hard limits (seconds; the sum is what `all` can take at most):
#     setup 30 (pydantic from vendor/wheels, offline) + gpu 270 (stand-ins 25 + 65, gpu.py 180)
#     + l1 120 + nuclear 120 = 560 <= 600
# A part cut by its limit leaves what it wrote (gpu.py saves OUT/bench/gpu.json after every
# measurement; e5_protocol.py its CSV after every group); exit status 124 names it in OUT/parts.txt.
#
# The GPU machines have numpy, scipy, numba, pandas, pyyaml, filelock and jax (Python 3.12) but
# not pydantic: its wheels, built for that Python, are committed in vendor/wheels (2.7 MB; the
# download, from a machine with the package index):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d vendor/wheels \
#     pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
# They have no ray or mlflow: the tests that need them fail there.
# A rerun with the same OUT resumes: e5_protocol.py skips the groups its CSV already holds.
# Afterwards, on the development machine: copy OUT/bench/gpu.json to benchmarks/results/ (e.g.
# gpu_compiled_h200.json) and run `python results/generate.py` (docs/gpu.md's table).
set -uo pipefail
out=${1:?usage: device_session.sh OUT [gpu|l1|nuclear|all] [ANCHORS]}
part=${2:-all}
cd "$(dirname "$0")/.."
# the checkout's fco_ray, results and benchmarks (installed editable here; not installed on a lent
# machine, where the scripts run with the system python3)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
anchors=${3:-}
if [[ -z $anchors ]]; then
  for d in build/anchors ../shared/anchors; do [[ -f $d/gpu_nuclear.py ]] && anchors=$d && break; done
fi
mkdir -p "$out"
: > "$out/parts.txt"

# limited NAME SECONDS CMD...: run CMD under a hard limit, record its exit status and seconds
limited() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  timeout --kill-after=5 "$limit" "$@"
  rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0)) limit=$limit" | tee -a "$out/parts.txt"
  return 0
}

limited setup 30 bash -c 'python3 -c "import pydantic" 2>/dev/null || python3 -m pip install -q --no-index --no-deps vendor/wheels/*.whl'
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/device.txt" 2>&1 || true
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" >> "$out/device.txt" 2>&1 || true

if [[ $part == gpu || $part == all ]]; then
  if [[ -n $anchors ]]; then
    echo "anchors from $anchors" > "$out/anchors.txt"
    # the floor-shaped stand-ins (plain PyTorch, then JAX with the nuclear prox by the Gram route;
    # the library-SVD route takes seconds per round there: not run)
    limited stand_in 25 bash -c "python3 '$anchors/gpu_stand_in.py' > '$out/gpu_stand_in.log' 2>&1"
    limited stand_in_nuclear 65 bash -c "NUC_ROUTE=gram python3 '$anchors/gpu_nuclear.py' > '$out/gpu_nuclear.log' 2>&1"
  else
    echo "no anchors (gpu_stand_in.py, gpu_nuclear.py) found: pass their folder as the third argument" > "$out/anchors.txt"
  fi
  limited gpu 180 bash -c "python3 benchmarks/gpu.py --out '$out/bench' --time-limit 150 | tail -40"
fi
if [[ $part == l1 || $part == all ]]; then
  limited l1 120 bash -c "python3 results/e5_protocol.py --problem l1 --out '$out/e5' --ks 10,1 --time-limit 95 | tail -15"
fi
if [[ $part == nuclear || $part == all ]]; then
  limited nuclear 120 bash -c "python3 results/e5_protocol.py --problem nuclear --out '$out/e5' --ks 10,1 --time-limit 95 | tail -15"
fi
cat "$out/parts.txt"
