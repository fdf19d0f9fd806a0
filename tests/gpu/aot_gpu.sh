#!/usr/bin/env bash
# AOT launchers on the GPU runner (issue 5): a C program links tilec-generated code, its results
# must equal the JIT's, and the launcher's host overhead is measured against a raw cuLaunchKernel.
#
#   bash tests/gpu/aot_gpu.sh prepare   on a build machine with an LLVM 19 prefix: builds tilec's
#                                       native core for the runner's Python and stages the package
#                                       (plus pytest wheels) in .carry/aot-gpu (git-ignored; carry it)
#   bash tests/gpu/aot_gpu.sh run       on the GPU machine, with .carry/aot-gpu carried: runs
#                                       tests/gpu/test_aot_gpu.py and writes $OUT/aot-overhead.json,
#                                       $OUT/aot-junit.xml and $OUT/aot-log.txt
#
# prepare reads LLVM_PREFIX (/usr/lib/llvm-19) and RUNNER_PYTHON (a CPython of the runner's
# minor version with nanobind installed; default python3.12). The runner needs gcc, the CUDA
# toolkit (headers, ptxas, nvdisasm), numpy, llvmlite and cuda-bindings; pytest is carried.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=$REPO/.carry/aot-gpu
cmd=${1:-}

prepare() {
  local llvm=${LLVM_PREFIX:-/usr/lib/llvm-19}
  local py=${RUNNER_PYTHON:-python3.12}
  local build=${AOT_GPU_BUILD:-/tmp/tilec-aot-gpu-build}
  rm -rf "$CARRY" && mkdir -p "$CARRY/site" "$CARRY/wheels"
  cmake -G Ninja -S "$REPO/src/compiler" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_DIR="$llvm/lib/cmake/llvm" -DPython_EXECUTABLE="$(command -v "$py")" \
    -DTILEC_WITH_X86=OFF >/dev/null
  cmake --build "$build" -j "${JOBS:-2}"
  cp -r "$REPO/src/compiler/tilec" "$CARRY/site/tilec"
  find "$CARRY/site" -name __pycache__ -prune -exec rm -rf {} +
  local core
  core=$(ls "$build"/_core*.so)
  strip --strip-unneeded -o "$CARRY/site/tilec/$(basename "$core")" "$core"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 -d "$CARRY/wheels" \
    pytest==9.0.3 pluggy iniconfig packaging pygments
  git -C "$REPO" rev-parse HEAD >"$CARRY/commit"
  du -sh "$CARRY"
}

run() {
  local out=${OUT:-/tmp/aot-gpu-out}
  mkdir -p "$out"
  [[ -d $CARRY/site/tilec ]] || { echo "no $CARRY/site/tilec: run '$0 prepare' and carry .carry/aot-gpu" >&2; exit 2; }
  local site=$CARRY/site
  if ! python3 -c 'import pytest' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/aot-gpu-site "$CARRY"/wheels/*.whl
    site=$site:/tmp/aot-gpu-site
  fi
  export PYTHONPATH=$site TILEC_TEST_INSTALLED=1 TILEC_CACHE_DIR=/tmp/aot-gpu-cache
  export TILEC_AOT_REPORT=$out/aot-overhead.json
  export HERMETIC_RUNNER_COMMIT=${HERMETIC_RUNNER_COMMIT:-$(cat "$CARRY/commit" 2>/dev/null || echo unknown)}
  export PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin
  cd "$REPO"
  {
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    python3 -c 'import tilec, llvmlite, numpy, cuda.bindings; print("tilec", tilec.__file__, tilec.llvm_version())'
    python3 -m pytest tests/gpu/test_aot_gpu.py tests/gpu/test_kernels_gpu.py -m gpu -p no:cacheprovider \
      -v -rA --junitxml="$out/aot-junit.xml"
  } 2>&1 | tee "$out/aot-log.txt"
  return "${PIPESTATUS[0]}"
}

case $cmd in
  prepare) prepare ;;
  run) run ;;
  *) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
