#!/usr/bin/env bash
# Run the tilec-vs-Triton benchmarks on a CUDA machine in one go:
#   bash bench/tilec_gpu.sh [WHEEL_DIR]
# Installs the tilec wheel from WHEEL_DIR (default .bench-carry/, built elsewhere against
# an LLVM 19 prefix) into a private target, then runs compile, launch, bandwidth and
# assembler (ptxas against nvJitLink on the same PTX: SASS, registers, spills, local memory).
# JSON and one log go to $OUT (else reports/); tilec_report.py makes the markdown
# (tilec_assembler.py writes its own).
# TILEC_BENCH_BASELINE=DIR: another tilec wheel (main's, say) whose cache hits tilec_compile.py
# measures beside this one's, fresh processes taking turns (--baseline-site), and whose launch
# tilec_launch.py measures again ($OUT/baseline); TILEC_BENCH_FRESH=N: fresh processes per
# warm-hit kind (default 3).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WHEELS=${1:-$REPO/.bench-carry}
OUT=${OUT:-$REPO/reports}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
[[ -d $WHEELS ]] && WHEELS=$(cd "$WHEELS" && pwd)
cd "$REPO" || exit 2  # the benches run as `python3 -m bench.NAME` from the checkout
SITE=$(mktemp -d)/site
PY=${PYTHON:-python3}

shopt -s nullglob
whl=("$WHEELS"/tilec-*.whl)
((${#whl[@]} == 1)) || { echo "expected one tilec wheel in $WHEELS, found ${#whl[@]}"; exit 2; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${whl[0]}" || exit 2
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export BENCH_COMMIT=${BENCH_COMMIT:-unknown}

echo "== $(nvidia-smi --query-gpu=name,driver_version,temperature.gpu,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
echo "== $(nproc) cores; $("$PY" -V 2>&1); tilec from $SITE; ptxas $(command -v ptxas || ls /usr/local/cuda/bin/ptxas 2>&1)"

rc=0
compile_args=(--fresh "${TILEC_BENCH_FRESH:-3}")
if [[ -n ${TILEC_BENCH_BASELINE:-} ]]; then
  base=("$TILEC_BENCH_BASELINE"/tilec-*.whl)
  BSITE=$(mktemp -d)/site
  if ((${#base[@]} == 1)) && "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$BSITE" "${base[0]}"; then
    echo "== baseline tilec for the warm hits: ${base[0]}"
    compile_args+=(--baseline-site "$BSITE")
    BASELINE_SITE=$BSITE
  else
    echo "== no usable baseline wheel in $TILEC_BENCH_BASELINE"; rc=1
  fi
fi
for b in compile launch bandwidth assembler; do
  echo "== tilec_$b.py"
  args=()
  [[ $b == compile ]] && args=("${compile_args[@]}")
  "$PY" -m "bench.tilec_$b" --out "$OUT" "${args[@]}" || rc=1
done
# The baseline's launch too, in $OUT/baseline: a before/after on the same machine (each run
# also times raw cuLaunchKernel and Triton, so its ratios stand alone).
if [[ -n ${BASELINE_SITE:-} ]]; then
  echo "== tilec_launch.py with the baseline tilec"
  mkdir -p "$OUT/baseline"
  PYTHONPATH="$BASELINE_SITE${PYTHONPATH#"$SITE"}" "$PY" -m bench.tilec_launch --out "$OUT/baseline" || rc=1
  "$PY" -m bench.tilec_report --dir "$OUT/baseline" || rc=1
fi
# Optional: a second tilec wheel (a prototype fix, say) for the cold compile only, in $OUT/proto.
if [[ -n ${TILEC_BENCH_PROTO:-} ]]; then
  proto=("$TILEC_BENCH_PROTO"/tilec-*.whl)
  PSITE=$(mktemp -d)/site
  if ((${#proto[@]} == 1)) && "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$PSITE" "${proto[0]}"; then
    echo "== tilec_compile.py --only cold with ${proto[0]}"
    PYTHONPATH="$PSITE${PYTHONPATH#"$SITE"}" "$PY" -m bench.tilec_compile --only cold --out "$OUT/proto" || rc=1
  else
    echo "== no usable prototype wheel in $TILEC_BENCH_PROTO"; rc=1
  fi
fi
"$PY" -m bench.tilec_report --dir "$OUT" || rc=1
exit $rc
