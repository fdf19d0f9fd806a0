#!/usr/bin/env bash
# GPU runner: on a CUDA machine without network, build the `support` and the `nvptx`
# LLVM variants from the pruned source archive with the pinned toolchain, check the
# test_package PTX with ptxas, build the tilec wheel against nvptx offline, install
# the wheel into a fresh venv, run the gpu test tier, and write one JSON report
# (always, also when a step fails).
#
#   bash tests/gpu/runner.sh [--source ARCHIVE] [--out DIR] [--work DIR] [--jobs N]
#                            [--wheelhouse DIR] [--wheels DIR] [--no-pack]
#                            [--toolchain NAME] [--mirror DIR] [--bench] [--no-support]
#                            [--again] [--tilec-bench [--baseline-src DIR]] [--cold-ab] [--compare-host] [--arch ARCH] [--qemu DIR]
#                            [--llvm-version V] [--no-wheel] [--llvmlite SDIST] [--numba SDIST]
#                            [--scale [--scale-tools DIR] [--scale-runs LIST] [--scale-hosts N] [--scale-slots N]]
#
# Every option also reads an environment variable (HERMETIC_RUNNER_<NAME>):
#   --source      pruned archive, its pruned.json beside it   (.carry/llvm-project-19.1.7.src-nvptx.tar.xz)
#   --out         report, log, junit xml, record, PTX, wheel, install-tree parts   (/tmp/hermetic-runner/out)
#   --work        build directories, venv, private site-packages                  (/tmp/hermetic-runner/work)
#   --jobs        parallel build jobs                                             (nproc)
#   --wheelhouse  the hash-pinned build requirements `hermetic fetch` downloads   (.carry/wheelhouse)
#   --wheels      wheels to install first into a private target (conan and its
#                 pure-Python needs that the machine lacks)                       (.whl)
#   --no-pack     do not tar the install tree (HERMETIC_RUNNER_PACK=0)
#   --variant     LLVM variant (nvptx; another is only useful to try the runner itself)
#   --llvm-version  the LLVM release to build (recipes/llvm/conandata.yml)        (its default_version)
#   --no-wheel    no tilec wheel and no gpu tier (e.g. a release tilec does not build against)
#                 (HERMETIC_RUNNER_WHEEL=0)
#   --llvmlite    llvmlite's release sdist: `hermetic wheel --recipe llvmlite` against the variant, twice
#                 (same sha256 required), the first installed into a fresh venv, `python -m llvmlite.tests`
#                 run (llvmlite-*.whl and its SBOM/provenance, llvmlite-wheel-record*.json,
#                 llvmlite-build-N.log, llvmlite-tests.log, llvmlite-tests.json in --out)
#   --numba       with --llvmlite: Numba's release sdist built on that llvmlite (the machine's compiler
#                 and NumPy), installed into its venv, a @njit smoke test (llvmlite-numba-smoke.json)
#   --arch        build LLVM for this architecture (amd64, arm64); another than the runner's is
#                 cross-built, its test_package run under qemu-user, and there is no wheel or gpu
#                 tier for it (its programs do not run on this GPU's host)      (the runner's)
#   --qemu        for a cross build on a runner without Debian's qemu-user-static and libc6-*-cross:
#                 a directory with qemu-ARCH.tar.xz holding bin/qemu-*-static and the cross
#                 loader/libc tree (tests/gpu/runner/qemu-carry.sh writes it)   (.qemu, if there)
#   --toolchain   the compiler, a name in toolchain/toolchains.yml: zig or host   (its `default:`)
#   --mirror      where the pinned toolchain is found: the zig wheel or its slim
#                 archive (the runner has no network)                             (.zig, if there)
#   --bench       last, bench/toolchain_build.py: `support` built with host and with zig
#                 side by side (toolchain-build-support.json in --out)            (HERMETIC_RUNNER_BENCH=1)
#   --bench-compare  what --bench compares: toolchain (host, zig) or arch (native, cross-built
#                 for the other architecture: cross-build-VARIANT.json)           (toolchain)
#   --bench-variant  the variant --bench builds twice                             (support)
#   --no-support  skip the `support` build (its digest is evidenced elsewhere)    (HERMETIC_RUNNER_SUPPORT=0)
#   --again       build the wheel a second time in another work dir, umask 077 and cwd, and
#                 require the same sha256 (wheel-again.json)                      (HERMETIC_RUNNER_AGAIN=1)
#   --tilec-bench bench/tilec_gpu.sh with the wheel (tilec against Triton and raw cuda-python;
#                 JSON in --out/tilec-bench)                                      (HERMETIC_RUNNER_TILEC_BENCH=1)
#   --baseline-src  with --tilec-bench: another tilec source (e.g. `git archive REV src/compiler`), its wheel
#                 built against the same tree and its warm hits measured beside this one's
#                 (TILEC_BENCH_FRESH fresh processes each, 11)
#   --cold-ab     with --baseline-src: tilec's cold compile with this wheel and with the baseline's, the two
#                 taking turns for HERMETIC_RUNNER_COLD_ROUNDS rounds of HERMETIC_RUNNER_COLD_REPS compiles
#                 (bench/tilec_compile.py --only cold: --out/cold-this/round-N, --out/cold-baseline/round-N;
#                 a before/after of a change to the cold path on one machine)        (HERMETIC_RUNNER_COLD_AB=1)
#   --compare-host  the variant again with the host compiler (timed beside the pinned toolchain's
#                 build: host-record.json), tilec's wheel against it, and tilec's cold compile
#                 with each wheel, the two taking turns for HERMETIC_RUNNER_COLD_ROUNDS rounds (4) of
#                 HERMETIC_RUNNER_COLD_REPS compiles (9) (--out/cold-<toolchain>/round-N)  (HERMETIC_RUNNER_COMPARE_HOST=1)
#   --scale       instead of the builds above: bench/scale_bench.py on the variant (cold, warm from a shared
#                 compile cache in another directory and as another user, distributed over distccd hosts on
#                 127.0.0.2, .3, …, substituted from a registry), every build offline from the carried archive,
#                 toolchain and wheelhouse (scale-VARIANT.json in --out; the work dirs, their build dirs and
#                 logs kept under --work/scale)                               (HERMETIC_RUNNER_SCALE=1)
#   --scale-tools a directory with scale-tools.tar.xz: redis-server, ccache, distcc(d) and docker-registry with
#                 the libraries they need, for a runner without them (tests/gpu/runner/scale-carry.sh
#                 writes it); its bin/ goes first on PATH                     (.scale, if there)
#   --scale-runs  scale_bench's --runs: which runs, in which order          (all five, cold first)
#   --scale-hosts, --scale-slots  distccd daemons, and the jobs each takes    (2, nproc/2)
#
# Carrying the zig toolchain: the 101 MB wheel is too big for a device call, its 46 MB slim
# archive is not. Where the wheel can be fetched, `hermetic toolchain slim --output .zig`
# writes the archive (checked against its pin in toolchains.yml) and slim.json into .zig/
# (git-ignored); carry .zig with the checkout and run with --toolchain zig.
#
# The `support` variant is built first from the same (nvptx-pruned) archive: it needs only
# LLVMSupport, Demangle and the X86 target's configure, which that archive holds (its inputs
# digest names that archive, its tree digest does not): the tree digest a `support` build
# elsewhere with the same toolchain can be compared with.
#
# Outputs in --out: report.json, junit.xml, record.json, support-record.json, kernel.sm_80.ptx, the wheel,
# llvm-$VARIANT-install.tar.xz.part-NN (15 MiB each; `cat` them to reassemble), and
# `done` (the exit code), written last. Exit code: 0 when every step passed.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HELPERS="$REPO/tests/gpu/runner"

SOURCE=${HERMETIC_RUNNER_SOURCE:-$REPO/.carry/llvm-project-19.1.7.src-nvptx.tar.xz}
OUT=${HERMETIC_RUNNER_OUT:-/tmp/hermetic-runner/out}
WORK=${HERMETIC_RUNNER_WORK:-/tmp/hermetic-runner/work}
JOBS=${HERMETIC_RUNNER_JOBS:-$(nproc)}
WHEELHOUSE=${HERMETIC_RUNNER_WHEELHOUSE:-}
[[ -z $WHEELHOUSE && -d $REPO/.carry/wheelhouse ]] && WHEELHOUSE=$REPO/.carry/wheelhouse
WHEELS=${HERMETIC_RUNNER_WHEELS:-$REPO/.whl}
PACK=${HERMETIC_RUNNER_PACK:-1}
BENCH=${HERMETIC_RUNNER_BENCH:-0}
SUPPORT=${HERMETIC_RUNNER_SUPPORT:-1}
AGAIN=${HERMETIC_RUNNER_AGAIN:-0}
TILEC_BENCH=${HERMETIC_RUNNER_TILEC_BENCH:-0}
COMPARE_HOST=${HERMETIC_RUNNER_COMPARE_HOST:-0}
COLD_AB=${HERMETIC_RUNNER_COLD_AB:-0}
BENCH_COMPARE=${HERMETIC_RUNNER_BENCH_COMPARE:-toolchain}
BENCH_VARIANT=${HERMETIC_RUNNER_BENCH_VARIANT:-support}
COLD_ROUNDS=${HERMETIC_RUNNER_COLD_ROUNDS:-4}
COLD_REPS=${HERMETIC_RUNNER_COLD_REPS:-9}
VARIANT=${HERMETIC_RUNNER_VARIANT:-nvptx}
TOOLCHAIN=${HERMETIC_RUNNER_TOOLCHAIN:-}   # empty: toolchains.yml's default, resolved below
MIRROR=${HERMETIC_RUNNER_MIRROR:-}
[[ -z $MIRROR && -d $REPO/.zig ]] && MIRROR=$REPO/.zig
ARCH=${HERMETIC_RUNNER_ARCH:-}
LLVM_VERSION=${HERMETIC_RUNNER_LLVM_VERSION:-}
WHEEL=${HERMETIC_RUNNER_WHEEL:-1}
LLVMLITE=${HERMETIC_RUNNER_LLVMLITE:-}
NUMBA=${HERMETIC_RUNNER_NUMBA:-}
BASELINE_SRC=${HERMETIC_RUNNER_BASELINE_SRC:-}
QEMU=${HERMETIC_RUNNER_QEMU:-}
[[ -z $QEMU && -d $REPO/.qemu ]] && QEMU=$REPO/.qemu
SCALE=${HERMETIC_RUNNER_SCALE:-0}
SCALE_TOOLS=${HERMETIC_RUNNER_SCALE_TOOLS:-}
[[ -z $SCALE_TOOLS && -d $REPO/.scale ]] && SCALE_TOOLS=$REPO/.scale
SCALE_RUNS=${HERMETIC_RUNNER_SCALE_RUNS:-}
SCALE_HOSTS=${HERMETIC_RUNNER_SCALE_HOSTS:-2}
SCALE_SLOTS=${HERMETIC_RUNNER_SCALE_SLOTS:-}
PART_SIZE=15M

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
  case $1 in
    --source) SOURCE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --jobs|-j) JOBS=$2; shift 2 ;;
    --wheelhouse) WHEELHOUSE=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --no-pack) PACK=0; shift ;;
    --bench) BENCH=1; shift ;;
    --bench-compare) BENCH_COMPARE=$2; shift 2 ;;
    --bench-variant) BENCH_VARIANT=$2; shift 2 ;;
    --no-support) SUPPORT=0; shift ;;
    --again) AGAIN=1; shift ;;
    --tilec-bench) TILEC_BENCH=1; shift ;;
    --compare-host) COMPARE_HOST=1; shift ;;
    --cold-ab) COLD_AB=1; shift ;;
    --variant) VARIANT=$2; shift 2 ;;
    --toolchain) TOOLCHAIN=$2; shift 2 ;;
    --mirror) MIRROR=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --llvm-version) LLVM_VERSION=$2; shift 2 ;;
    --no-wheel) WHEEL=0; shift ;;
    --llvmlite) LLVMLITE=$2; shift 2 ;;
    --numba) NUMBA=$2; shift 2 ;;
    --baseline-src) BASELINE_SRC=$2; shift 2 ;;
    --qemu) QEMU=$2; shift 2 ;;
    --scale) SCALE=1; shift ;;
    --scale-tools) SCALE_TOOLS=$2; shift 2 ;;
    --scale-runs) SCALE_RUNS=$2; shift 2 ;;
    --scale-hosts) SCALE_HOSTS=$2; shift 2 ;;
    --scale-slots) SCALE_SLOTS=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "runner: unknown argument $1" >&2; usage 2 ;;
  esac
done

if ((COLD_AB)) && [[ -z $BASELINE_SRC ]]; then
  echo "runner: --cold-ab compares with the baseline: give its source with --baseline-src DIR" >&2
  exit 2
fi
mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd); WORK=$(cd "$WORK" && pwd)
rm -rf "$OUT/done" "$OUT/steps.jsonl" "$OUT/facts.env" "$OUT/report.json" "$OUT/junit.xml" "$OUT"/*.whl "$OUT/wheel-record.json" \
  "$OUT/record.json" "$OUT/support-record.json" "$OUT"/toolchain-build-*.json "$OUT"/cross-build-*.json "$WORK/logs" "$OUT"/llvmlite-* \
  "$OUT/wheel-again.json" "$OUT/host-record.json" "$OUT/tilec-bench" "$OUT"/cold-* "$OUT"/scale-*.json
STEPS="$OUT/steps.jsonl"
FACTS="$OUT/facts.env"       # KEY=VALUE lines the report helper reads
SITE="$WORK/site"            # carried wheels (conan) go here
BIN="$WORK/bin"              # a `conan` that finds $SITE, first on PATH
HW="$WORK/hermetic"          # hermetic --work-dir
VENV="$WORK/venv"
DIST="$WORK/dist"
PY=${PYTHON:-python3}
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
FAILED=0

fact() { printf '%s=%s\n' "$1" "$2" >>"$FACTS"; }
say() { printf '[runner %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# step NAME CMD...: run one timed step; its result goes to steps.jsonl.
step() {
  local name=$1; shift
  say "step $name: start"
  local t0 t1 rc
  t0=$(date +%s.%N)
  mkdir -p "$WORK/logs"
  "$@" 2>&1 | tee "$WORK/logs/$name.log"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  local wall
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  local status=ok
  if ((rc != 0)); then status=failed; FAILED=1; fi
  printf '{"name":"%s","status":"%s","rc":%d,"wall_s":%s}\n' "$name" "$status" "$rc" "$wall" >>"$STEPS"
  say "step $name: $status (rc $rc, ${wall}s)"
  return "$rc"
}

# skip NAME REASON: a step that could not run because an earlier one failed.
skip() {
  local reason=${2//\"/\'}
  printf '{"name":"%s","status":"skipped","reason":"%s"}\n' "$1" "$reason" >>"$STEPS"
  say "step $1: skipped ($2)"
}

finish() {
  local rc=$?
  ((rc == 0 && FAILED)) && rc=1
  fact FINISHED "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  say "writing $OUT/report.json"
  PYTHONPATH="$REPO/src" "$PY" "$HELPERS/report.py" --out "$OUT" --work "$WORK" --repo "$REPO" --exit-code "$rc" \
    || { echo "runner: report helper failed" >&2; rc=${rc:-1}; ((rc == 0)) && rc=3; }
  echo "$rc" >"$OUT/done"
  say "done (exit $rc)"
  exit "$rc"
}
trap finish EXIT

fact STARTED "$STARTED"
fact SOURCE "$SOURCE"
fact JOBS "$JOBS"
fact VARIANT "$VARIANT"
fact PACK_NAME "llvm-$VARIANT-install.tar.xz"
fact WHEELHOUSE "$WHEELHOUSE"
fact PY "$(command -v "$PY")"
fact COMMIT "${HERMETIC_RUNNER_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
say "repo $REPO, out $OUT, work $WORK, jobs $JOBS, source $SOURCE"

# --- 1. carried wheels into a private target -----------------------------------------------
install_wheels() {
  rm -rf "$SITE" "$BIN" && mkdir -p "$SITE" "$BIN" || return 1
  shopt -s nullglob
  local whl=("$WHEELS"/*.whl)
  shopt -u nullglob
  if ((${#whl[@]})); then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "${whl[@]}" || return 1
  fi
  # hermetic runs Conan with its own import path (PYTHONPATH below reaches it); this launcher is
  # for running the carried conan by hand and for the version line in the log.
  cat >"$BIN/conan" <<EOF
#!/bin/sh
PYTHONPATH="$SITE\${PYTHONPATH:+:\$PYTHONPATH}" exec "$(command -v "$PY")" -m conans.conan "\$@"
EOF
  chmod +x "$BIN/conan"
  "$BIN/conan" --version
}
export PATH="$BIN:$PATH"
export PYTHONPATH="$REPO/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
hermetic() { "$PY" -m hermetic "$@"; }

if ! step install-wheels install_wheels; then
  for s in build-support build-llvm ptxas wheel venv gpu-tests pack; do skip "$s" "install-wheels failed"; done
  exit 1
fi

# --- 2. LLVM support, then nvptx, from the pruned archive, offline ------------------------------
OFFLINE=require
if unshare --net -- true 2>/dev/null || unshare --user --map-root-user --net -- true 2>/dev/null; then
  fact OFFLINE_FALLBACK ""
else
  OFFLINE=auto
  fact OFFLINE_FALLBACK "this machine cannot create a network namespace (unshare --net failed); built with --offline auto"
  say "WARNING: no network namespace here; building with --offline auto"
fi
fact OFFLINE "$OFFLINE"
if [[ -f $SOURCE ]]; then
  fact SOURCE_SHA256 "$(sha256sum "$SOURCE" | cut -d' ' -f1)"
  fact SOURCE_SIZE "$(stat -c %s "$SOURCE")"
fi

# The toolchain and where it comes from, the same for every build step.
if [[ -z $TOOLCHAIN ]]; then
  TOOLCHAIN=$("$PY" -c 'import sys; from pathlib import Path; from hermetic import toolchain
print(toolchain.load(Path(sys.argv[1])).default)' "$REPO/toolchain") || TOOLCHAIN=""
fi
fact TOOLCHAIN "$TOOLCHAIN"
fact MIRROR "$MIRROR"
TC_ARGS=()
[[ -n $TOOLCHAIN ]] && TC_ARGS+=(--toolchain "$TOOLCHAIN")
[[ -n $MIRROR ]] && TC_ARGS+=(--mirror "$MIRROR")
# cmake and ninja from the pinned wheelhouse once `build llvm` takes --wheelhouse (until then, the machine's).
BUILD_ARGS=("${TC_ARGS[@]}")
if [[ -n $WHEELHOUSE ]] && hermetic build llvm --help 2>/dev/null | grep -q -- --wheelhouse; then
  BUILD_ARGS+=(--wheelhouse "$WHEELHOUSE")
  fact BUILD_WHEELHOUSE "$WHEELHOUSE"
fi
# Another architecture than the runner's: cross-built, its test_package under qemu-user (carried
# where the machine has none: hermetic looks for qemu-ARCH-static on PATH and the loader under /usr).
case $(uname -m) in x86_64) HERE_ARCH=amd64 ;; aarch64) HERE_ARCH=arm64 ;; *) HERE_ARCH=$(uname -m) ;; esac
FOREIGN=0
if [[ -n $ARCH ]]; then
  BUILD_ARGS+=(--arch "$ARCH")
  [[ $ARCH != "$HERE_ARCH" ]] && FOREIGN=1
fi
fact ARCH "${ARCH:-$HERE_ARCH}"
if [[ -n $LLVM_VERSION ]]; then
  BUILD_ARGS+=(--llvm-version "$LLVM_VERSION")
fi
fact LLVM_VERSION "$LLVM_VERSION"
install_qemu() {
  local tarball
  tarball=$(ls "$QEMU"/qemu-*.tar.xz 2>/dev/null | head -n 1)
  [[ -n $tarball ]] || { echo "no qemu-*.tar.xz in $QEMU"; return 1; }
  rm -rf "$WORK/qemu" && mkdir -p "$WORK/qemu" && tar -C "$WORK/qemu" -xJf "$tarball" || return 1
  local d
  for d in "$WORK/qemu"/usr/*-linux-gnu; do
    # the loader path is fixed (-L /usr/TRIPLE), as Debian's libc6-*-cross installs it
    [[ -e /usr/$(basename "$d") ]] || cp -a "$d" /usr/ || return 1
  done
  echo "qemu from $tarball: $(ls "$WORK/qemu/bin")"
}
NEED_QEMU=$FOREIGN
[[ $BENCH == 1 && $BENCH_COMPARE == arch ]] && NEED_QEMU=1
if ((NEED_QEMU)) && [[ -n $QEMU ]]; then
  if step install-qemu install_qemu; then export PATH="$WORK/qemu/bin:$PATH"; fi
fi
say "toolchain ${TOOLCHAIN:-(default)}, mirror ${MIRROR:-none}, build args: ${BUILD_ARGS[*]}"

# --- --scale: the scale report instead of the builds below ---------------------------------------
# scale_tools: the carried Debian binaries (scale-carry.sh), unpacked; bin/ goes first on PATH.
scale_tools() {
  [[ -f $SCALE_TOOLS/scale-tools.tar.xz ]] || { echo "no scale-tools.tar.xz in ${SCALE_TOOLS:-(none)}"; return 1; }
  rm -rf "$WORK/scale-tools" && mkdir -p "$WORK/scale-tools" && tar -C "$WORK/scale-tools" -xJf "$SCALE_TOOLS/scale-tools.tar.xz" || return 1
  chmod 755 "$WORK" "$WORK/scale-tools"  # the other user runs ccache from here
  cat "$WORK/scale-tools/versions.txt"
  local b
  for b in redis-server ccache distcc distccd docker-registry; do "$WORK/scale-tools/bin/$b" --version 2>&1 | head -n 1 || return 1; done
}
scale_bench() {
  local extra=(--source "$SOURCE" --offline "$OFFLINE" --no-downloads --keep-build --keep)
  [[ -n $MIRROR ]] && extra+=(--mirror "$MIRROR")
  [[ -n $WHEELHOUSE ]] && extra+=(--wheelhouse "$WHEELHOUSE")
  [[ -n $SCALE_RUNS ]] && extra+=(--runs "$SCALE_RUNS")
  local gpu os machine
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  machine="GPU runner (${gpu:-no GPU found}), $(nproc) cores, ${os:-Linux}; nothing else ran on it"
  rm -rf "$WORK/scale"
  (cd "$REPO" && HERMETIC_CACHE="$WORK/cache" PYTHONUNBUFFERED=1 "$PY" bench/scale_bench.py --variant "$VARIANT" \
    --toolchain "$TOOLCHAIN" --jobs "$JOBS" --hosts "$SCALE_HOSTS" --slots "${SCALE_SLOTS:-$((JOBS / 2))}" \
    --machine "$machine" --base "$WORK/scale" --json "$OUT/scale-$VARIANT.json" "${extra[@]}")
}
if ((SCALE)); then
  chmod 755 "$WORK" "$OUT"
  if step scale-tools scale_tools; then
    export PATH="$WORK/scale-tools/bin:$PATH"
    step scale scale_bench
  else
    skip scale "scale-tools failed"
  fi
  ((FAILED)) && exit 1
  exit 0
fi

# build_variant NAME: one LLVM variant from the carried archive.
build_variant() {
  hermetic build llvm --variant "$1" --source "$SOURCE" --jobs "$JOBS" --offline "$OFFLINE" \
    --work-dir "$HW" --cache "$WORK/cache" --no-apt --no-urls "${BUILD_ARGS[@]}"
}
# show_build_log NAME STEP: the end of a failed build's log, in the step's log too.
show_build_log() {
  tail -n 80 "$HW/llvm/$1/build.log" 2>/dev/null | sed 's/^/  build.log: /' | tee -a "$WORK/logs/$2.log"
}

# support first: minutes, and evidence of its own (a tree digest to compare across machines).
if ((!SUPPORT)); then
  skip build-support "--no-support"
elif step build-support build_variant support; then
  cp "$HW/llvm/support/record.json" "$OUT/support-record.json"
else
  show_build_log support build-support
fi

build_llvm() { build_variant "$VARIANT"; }
# the default release builds in llvm/VARIANT, another in llvm/VARIANT-VERSION (recipe.Recipe.build_name)
BUILD_NAME=$(PYTHONPATH="$REPO/src" "$PY" -c 'import sys; from pathlib import Path; from hermetic import recipe
print(recipe.load(Path(sys.argv[1]), version=sys.argv[3] or None).build_name(sys.argv[2]))' "$REPO/recipes" "$VARIANT" "$LLVM_VERSION") \
  || BUILD_NAME=$VARIANT
RECORD="$HW/llvm/$BUILD_NAME/record.json"
PTX="$HW/llvm/$BUILD_NAME/test_package/kernel.sm_80.ptx"
if ! step build-llvm build_llvm; then
  show_build_log "$BUILD_NAME" build-llvm
  skip ptxas "build-llvm failed"; skip wheel "build-llvm failed"; skip venv "build-llvm failed"
  skip gpu-tests "build-llvm failed"; skip pack "build-llvm failed"
  exit 1
fi
cp "$RECORD" "$OUT/record.json"
PREFIX=$("$PY" -c 'import json,sys,os; r=json.load(open(sys.argv[1])); print(os.path.join(r["install_root"], r["prefix"].lstrip("/")))' "$RECORD")
fact LLVM_PREFIX "$PREFIX"

# --- 3. ptxas accepts the test_package PTX ------------------------------------------------------
find_ptxas() {
  local c
  for c in "${TILEC_PTXAS:-}" "$(command -v ptxas 2>/dev/null)" "${CUDA_HOME:-/nonexistent}/bin/ptxas" /usr/local/cuda/bin/ptxas; do
    [[ -n $c && -x $c ]] && { echo "$c"; return 0; }
  done
  "$PY" - <<'EOF'
import glob, os, site
for d in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(d, "nvidia", "**", "bin", "ptxas"), recursive=True)):
        print(p); raise SystemExit(0)
raise SystemExit(1)
EOF
}
PTXAS=$(find_ptxas) || PTXAS=""
fact PTXAS "$PTXAS"
check_ptx() {
  [[ -n $PTXAS ]] || { echo "no ptxas found (TILEC_PTXAS, PATH, CUDA_HOME, /usr/local/cuda, nvidia wheels)"; return 1; }
  [[ -f $PTX ]] || { echo "the test_package wrote no PTX at $PTX"; return 1; }
  cp "$PTX" "$OUT/kernel.sm_80.ptx"
  "$PTXAS" -arch=sm_80 -v "$PTX" -o "$WORK/kernel.sm_80.cubin" 2>&1 | tee "$OUT/ptxas.txt"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) && fact CUBIN_SIZE "$(stat -c %s "$WORK/kernel.sm_80.cubin")"
  return "$rc"
}
# A variant whose test_package lowers no kernel (support) has no PTX to check: its record says so.
if "$PY" -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("test_package", {}).get("ptx") else 1)' "$RECORD"; then
  step ptxas check_ptx
else
  skip ptxas "the $VARIANT test_package lowers no PTX (its record lists none)"
fi

# --- 4. the tilec wheel against our LLVM, offline ----------------------------------------------
HAVE_WHEEL_CMD=0
hermetic wheel --help >/dev/null 2>&1 && HAVE_WHEEL_CMD=1
fact HAVE_WHEEL_CMD "$HAVE_WHEEL_CMD"
# wheel_into DIST WORK_DIR LLVM_PREFIX [args...]: the tilec wheel against one LLVM prefix.
wheel_into() {  # [... --project DIR]: another tilec source than this checkout's
  local dist=$1 hw=$2 prefix=$3 project=$REPO/src/compiler; shift 3
  rm -rf "$dist" && mkdir -p "$dist" || return 1
  local extra=()
  [[ -n $WHEELHOUSE ]] && extra+=(--wheelhouse "$WHEELHOUSE")
  if (($# >= 2)) && [[ ${*: -2:1} == --project ]]; then project=${*: -1}; set -- "${@:1:$#-2}"; fi
  hermetic wheel "$project" --llvm "$prefix" --output "$dist" --offline "$OFFLINE" \
    --work-dir "$hw" --cache "$WORK/cache" --jobs "$JOBS" "${extra[@]}" "$@"
}
# one_wheel DIST: the path of the one wheel in DIST
one_wheel() {
  shopt -s nullglob
  local w=("$1"/*.whl)
  shopt -u nullglob
  ((${#w[@]} == 1)) || { echo "expected one wheel in $1, found ${#w[@]}" >&2; return 1; }
  echo "${w[0]}"
}
build_wheel() {
  wheel_into "$DIST" "$HW" "$PREFIX" "${TC_ARGS[@]}" || return 1
  cp "$DIST/wheel-record.json" "$OUT/" 2>/dev/null
  local w
  w=$(one_wheel "$DIST") || return 1
  fact WHEEL "$w"
  cp "$w" "$OUT/"
}
WHEEL_OK=0
if ((!WHEEL)); then
  skip wheel "--no-wheel"
elif ((FOREIGN)); then
  skip wheel "an $ARCH tree: its wheel would not run on this $HERE_ARCH machine"
elif ((HAVE_WHEEL_CMD)); then
  if step wheel build_wheel; then WHEEL_OK=1; else
    tail -n 60 "$HW/wheel/build.log" 2>/dev/null | sed 's/^/  wheel build.log: /' | tee -a "$WORK/logs/wheel.log"
  fi
else
  skip wheel "this checkout has no 'hermetic wheel' command"
fi

# --- 5. a fresh venv with the wheel, and the gpu tier ------------------------------------------
# parent_packages VENV: when python3 is itself a venv (the CUDA image's is), --system-site-packages
# points at the base interpreter, not at the packages beside torch: name those in a .pth, after our own.
parent_packages() {
  local purelib
  purelib=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))') || return 1
  "$PY" -c 'import site; print("\n".join(site.getsitepackages()))' >"$purelib/zz_runner_parent.pth"
}
make_venv() {
  rm -rf "$VENV"
  local how=pip
  "$PY" -m venv --system-site-packages "$VENV" || { how=no-pip; rm -rf "$VENV"; "$PY" -m venv --without-pip --system-site-packages "$VENV" || return 1; }
  parent_packages "$VENV" || return 1
  local w
  w=$(grep '^WHEEL=' "$FACTS" | tail -1 | cut -d= -f2-)
  if [[ $how == pip ]]; then
    "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-cache-dir "$w" || return 1
  else
    "$PY" -m pip --python "$VENV/bin/python" install -q --no-index --no-deps --no-cache-dir "$w" || return 1
  fi
  (cd / && env -u PYTHONPATH "$VENV/bin/python" -c '
import importlib.metadata as m, tilec, sys
print("tilec", m.version("tilec"), "from", tilec.__file__)
assert sys.prefix != sys.base_prefix
for name in ("torch", "cuda.bindings", "llvmlite", "numpy", "pytest"):
    __import__(name)
')
}
run_gpu_tests() {
  # pytest from the repo root (its markers and settings), tilec from the venv only.
  (cd "$REPO" && env -u PYTHONPATH TILEC_TEST_INSTALLED=1 TILEC_CACHE_DIR="$WORK/tilec-cache" \
    ${PTXAS:+TILEC_PTXAS="$PTXAS"} "$VENV/bin/python" -m pytest tests/gpu -m gpu -p no:cacheprovider \
    -v -rA --junitxml="$OUT/junit.xml") || return
  # On a GPU runner a tier that only skipped has not tested anything.
  "$PY" - "$OUT/junit.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
passed = [c for c in cases if not any(ch.tag in ("failure", "error", "skipped") for ch in c)]
if not passed:
    sys.exit(f"no gpu test passed ({len(cases)} collected): is there a CUDA device?")
EOF
}
if ((WHEEL_OK)); then
  if step venv make_venv; then
    step gpu-tests run_gpu_tests
  else
    skip gpu-tests "the wheel could not be installed into a fresh venv"
  fi
else
  skip venv "no wheel"; skip gpu-tests "no wheel"
fi

# --- 5b. a third-party consumer: llvmlite from its release sdist, its own test suite ------------
# `hermetic wheel --recipe llvmlite` (recipes/llvmlite/wheel.yml): the sdist admitted from the directory the
# carried file is in only by its pinned sha256, built offline with the tree's own toolchain, tagged by
# auditwheel; twice, in two work dirs under two umasks, and the two sha256 must agree. The first wheel is
# installed into a fresh venv and llvmlite's suite runs against it.
LLVMLITE_VENV="$WORK/llvmlite-venv"
# llvmlite_wheel N: the wheel built in work dir N, into $WORK/llvmlite-distN
llvmlite_wheel() {
  local n=$1 dist="$WORK/llvmlite-dist$1" mask=022 extra=()
  [[ $n == 2 ]] && mask=077
  rm -rf "$dist" "$WORK/llvmlite-w$n" && mkdir -p "$dist" "$WORK/llvmlite-cwd$n" || return 1
  # absolute paths: the build runs from a directory of its own
  [[ -n $WHEELHOUSE ]] && extra+=(--wheelhouse "$(cd "$WHEELHOUSE" && pwd)")
  [[ -n $LLVM_VERSION ]] && extra+=(--llvm-version "$LLVM_VERSION")
  extra+=(--mirror "$(cd "$(dirname "$LLVMLITE")" && pwd)")
  (cd "$WORK/llvmlite-cwd$n" && umask $mask && hermetic wheel --recipe llvmlite --root "$REPO" --llvm "$PREFIX" --output "$dist" \
    --offline "$OFFLINE" --work-dir "$WORK/llvmlite-w$n" --cache "$WORK/cache" --jobs "$JOBS" --no-urls \
    "${TC_ARGS[@]}" "${extra[@]}") >"$OUT/llvmlite-build-$n.log" 2>&1 || {
    tail -n 40 "$OUT/llvmlite-build-$n.log"; tail -n 60 "$WORK/llvmlite-w$n/wheel/build.log" 2>/dev/null; return 1; }
  fact "LLVMLITE_WHEEL_$n" "$(basename "$(one_wheel "$dist")") sha256:$(sha256sum "$(one_wheel "$dist")" | cut -d' ' -f1)"
}
llvmlite_tests() {
  [[ -f $LLVMLITE ]] || { echo "no llvmlite sdist at $LLVMLITE"; return 1; }
  fact LLVMLITE_SDIST "$(basename "$LLVMLITE") sha256:$(sha256sum "$LLVMLITE" | cut -d' ' -f1)"
  local t0 w
  t0=$(date +%s); llvmlite_wheel 1 || return 1; fact LLVMLITE_WHEEL_1_S $(($(date +%s) - t0))
  t0=$(date +%s); llvmlite_wheel 2 || return 1; fact LLVMLITE_WHEEL_2_S $(($(date +%s) - t0))
  w=$(one_wheel "$WORK/llvmlite-dist1") || return 1
  cp "$w" "$w".cdx.json "$w".intoto.json "$OUT/" && cp "$WORK/llvmlite-dist1/wheel-record.json" "$OUT/llvmlite-wheel-record.json"
  cp "$WORK/llvmlite-dist2/wheel-record.json" "$OUT/llvmlite-wheel-record-2.json"
  cmp -s "$w" "$(one_wheel "$WORK/llvmlite-dist2")" || { echo "the two llvmlite wheels differ"; return 1; }
  rm -rf "$LLVMLITE_VENV"
  "$PY" -m venv --system-site-packages "$LLVMLITE_VENV" && parent_packages "$LLVMLITE_VENV" || return 1
  "$LLVMLITE_VENV/bin/python" -m pip install -q --no-deps --no-index --force-reinstall "$w" || return 1
  (cd / && env -u PYTHONPATH "$LLVMLITE_VENV/bin/python" -c '
import llvmlite, llvmlite.binding as llvm
print("llvmlite", llvmlite.__version__, "from", llvmlite.__file__, "LLVM", ".".join(map(str, llvm.llvm_version_info)))')
  (cd / && env -u PYTHONPATH "$LLVMLITE_VENV/bin/python" -m llvmlite.tests -v >"$OUT/llvmlite-tests.log" 2>&1)
  tail -n 4 "$OUT/llvmlite-tests.log"
  "$PY" "$HELPERS/unittest_summary.py" "$OUT/llvmlite-tests.log" "$OUT/llvmlite-tests.json"
}
if [[ -n $LLVMLITE ]]; then step llvmlite-tests llvmlite_tests; fi

# --- 5c. Numba from its release sdist on that llvmlite: a @njit smoke test ------------------------
# Built "with what is there": the machine's compiler and NumPy (Numba's C extensions do not link LLVM),
# no build isolation, no index; installed into the llvmlite venv, where it must import the venv's llvmlite.
numba_smoke() {
  [[ -f $NUMBA ]] || { echo "no Numba sdist at $NUMBA"; return 1; }
  NUMBA=$(cd "$(dirname "$NUMBA")" && pwd)/$(basename "$NUMBA")  # absolute: pip runs from $WORK
  [[ -x $LLVMLITE_VENV/bin/python ]] || { echo "no llvmlite venv: the llvmlite step did not run"; return 1; }
  fact NUMBA_SDIST "$(basename "$NUMBA") sha256:$(sha256sum "$NUMBA" | cut -d' ' -f1)"
  rm -rf "$WORK/numba-dist" && mkdir -p "$WORK/numba-dist" || return 1
  local t0=$SECONDS
  (cd "$WORK" && MAX_JOBS=$JOBS "$LLVMLITE_VENV/bin/python" -m pip wheel -v --no-deps --no-build-isolation --no-index \
    -w "$WORK/numba-dist" "$NUMBA") >"$OUT/llvmlite-numba-build.log" 2>&1 || { tail -n 40 "$OUT/llvmlite-numba-build.log"; return 1; }
  fact NUMBA_BUILD_S $((SECONDS - t0))
  "$LLVMLITE_VENV/bin/python" -m pip install -q --no-deps --no-index --force-reinstall "$WORK"/numba-dist/numba-*.whl || return 1
  (cd / && env -u PYTHONPATH "$LLVMLITE_VENV/bin/python" "$HELPERS/numba_smoke.py" "$OUT/llvmlite-numba-smoke.json")
}
if [[ -n $NUMBA ]]; then
  if [[ -n $LLVMLITE ]]; then step numba-smoke numba_smoke; else skip numba-smoke "--numba needs --llvmlite"; fi
fi

# --- 6. the install tree, packed for carrying home ---------------------------------------------
pack() {
  local install epoch
  install=$(dirname "$(dirname "$(dirname "$PREFIX")")")  # .../install (holds usr/)
  epoch=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["source_date_epoch"])' "$RECORD")
  rm -f "$OUT"/llvm-$VARIANT-install.tar.xz*
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$install" -cf - usr | xz -T0 -6 >"$WORK/llvm-$VARIANT-install.tar.xz" || return 1
  fact PACK_SHA256 "$(sha256sum "$WORK/llvm-$VARIANT-install.tar.xz" | cut -d' ' -f1)"
  fact PACK_SIZE "$(stat -c %s "$WORK/llvm-$VARIANT-install.tar.xz")"
  split -b "$PART_SIZE" -d -a 2 "$WORK/llvm-$VARIANT-install.tar.xz" "$OUT/llvm-$VARIANT-install.tar.xz.part-" || return 1
  (cd "$OUT" && sha256sum llvm-$VARIANT-install.tar.xz.part-* >"$OUT/llvm-$VARIANT-install.parts.sha256")
}
if ((PACK)); then step pack pack; else skip pack "--no-pack"; fi

# --- 7. the same wheel again: another work dir, umask and cwd; the same sha256 required ----------
wheel_again() {
  local first second
  first=$(one_wheel "$DIST") || return 1
  mkdir -p "$WORK/again/cwd" || return 1
  (umask 077 && cd "$WORK/again/cwd" && wheel_into "$WORK/again/dist" "$WORK/again/hermetic" "$PREFIX" "${TC_ARGS[@]}") || return 1
  second=$(one_wheel "$WORK/again/dist") || return 1
  "$PY" "$HELPERS/same_wheel.py" "$first" "$second" "$OUT/wheel-again.json"
}
if ((AGAIN)); then
  if ((WHEEL_OK)); then step wheel-again wheel_again; else skip wheel-again "no wheel"; fi
fi

# --- 8. tilec against Triton and raw cuda-python with this wheel ----------------------------------
# baseline_wheel: another tilec (an earlier src/compiler, --baseline-src) built against the same tree, once
# (its log in --out/tilec-bench/baseline-wheel.log)
baseline_wheel() {
  [[ -f $WORK/baseline-dist/.built ]] && return 0
  mkdir -p "$OUT/tilec-bench" || return 1
  rm -rf "$WORK/baseline-dist"
  wheel_into "$WORK/baseline-dist" "$WORK/baseline-hw" "$PREFIX" "${TC_ARGS[@]}" \
    --project "$(cd "$BASELINE_SRC" && pwd)" >"$OUT/tilec-bench/baseline-wheel.log" 2>&1 \
    || { tail -n 30 "$OUT/tilec-bench/baseline-wheel.log"; return 1; }
  fact BASELINE_WHEEL "$(basename "$(one_wheel "$WORK/baseline-dist")")"
  touch "$WORK/baseline-dist/.built"
}
tilec_bench() {
  mkdir -p "$OUT/tilec-bench" || return 1
  local base=()
  if [[ -n $BASELINE_SRC ]]; then
    # its warm hits are measured beside this wheel's, fresh processes taking turns (bench/tilec_gpu.sh's
    # TILEC_BENCH_BASELINE)
    baseline_wheel || return 1
    base=(TILEC_BENCH_BASELINE="$WORK/baseline-dist" TILEC_BENCH_FRESH="${TILEC_BENCH_FRESH:-11}")
  fi
  (cd "$REPO" && env -u PYTHONPATH "${base[@]}" OUT="$OUT/tilec-bench" BENCH_COMMIT="$(grep '^COMMIT=' "$FACTS" | cut -d= -f2-)" \
    ${PTXAS:+TILEC_PTXAS="$PTXAS"} TILEC_CACHE_DIR="$WORK/tilec-bench-cache" bash bench/tilec_gpu.sh "$DIST")
}
if ((TILEC_BENCH)); then
  if ((WHEEL_OK)); then step tilec-bench tilec_bench; else skip tilec-bench "no wheel"; fi
fi

# --- 9. the host compiler beside the pinned one: the LLVM build time, and tilec's cold compile -----
HOST_HW="$WORK/host"
build_host() {
  hermetic build llvm --variant "$VARIANT" --source "$SOURCE" --jobs "$JOBS" --offline "$OFFLINE" \
    --work-dir "$HOST_HW" --cache "$WORK/cache" --no-apt --no-urls --toolchain host \
    ${WHEELHOUSE:+--wheelhouse "$WHEELHOUSE"} || return 1
  cp "$HOST_HW/llvm/$VARIANT/record.json" "$OUT/host-record.json"
}
# cold_site NAME WHEEL_DIR: that wheel installed into a private target, for the cold-compile rounds
cold_site() {
  local w site="$WORK/cold-$1/site"
  w=$(one_wheel "$2") || return 1
  rm -rf "$site" && mkdir -p "$site" || return 1
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$w"
}
# cold_compile NAME ROUND: bench/tilec_compile.py --only cold with NAME's wheel (--out/cold-NAME/round-ROUND)
cold_compile() {
  (cd "$REPO" && env PYTHONPATH="$WORK/cold-$1/site" ${PTXAS:+TILEC_PTXAS="$PTXAS"} TILEC_CACHE_DIR="$WORK/cold-$1/cache" \
    "$PY" bench/tilec_compile.py --only cold --reps "$COLD_REPS" --out "$OUT/cold-$1/round-$2")
}
# cold_rounds A B: the two wheels' cold compiles take turns (A, B; then B, A; ...), so that a slow stretch of
# the machine falls on both: one wheel after the other gave ratios from 0.78 to 1.10 on three kernels.
cold_rounds() {
  local r
  for ((r = 1; r <= COLD_ROUNDS; r++)); do
    if ((r % 2)); then
      cold_compile "$1" "$r" && cold_compile "$2" "$r" || return 1
    else
      cold_compile "$2" "$r" && cold_compile "$1" "$r" || return 1
    fi
  done
}
compare_host() {
  local host_prefix pinned=${TOOLCHAIN:-default}
  host_prefix=$("$PY" -c 'import json,sys,os; r=json.load(open(sys.argv[1])); print(os.path.join(r["install_root"], r["prefix"].lstrip("/")))' "$OUT/host-record.json") || return 1
  wheel_into "$WORK/dist-host" "$HOST_HW" "$host_prefix" --toolchain host || return 1
  cold_site "$pinned" "$DIST" && cold_site host "$WORK/dist-host" || return 1
  cold_rounds "$pinned" host
}
# --cold-ab: this wheel's cold compile beside the baseline's (--baseline-src), taking turns
cold_ab() {
  baseline_wheel && cold_site this "$DIST" && cold_site baseline "$WORK/baseline-dist" || return 1
  cold_rounds this baseline
}
if ((COLD_AB)); then
  if ((WHEEL_OK)); then step cold-ab cold_ab; else skip cold-ab "no wheel"; fi
fi
if ((COMPARE_HOST)); then
  if step build-host build_host; then
    if ((WHEEL_OK)); then step compare-host compare_host; else skip compare-host "no wheel"; fi
  else
    show_build_log "$VARIANT" build-host
    skip compare-host "build-host failed"
  fi
fi

# --- 10. bench: the same variant with the host compiler and with zig, one after the other --------
bench_toolchain() {
  local extra=(--mirror "$MIRROR")
  [[ -n $WHEELHOUSE ]] && extra+=(--wheelhouse "$WHEELHOUSE")
  rm -rf "$WORK/bench"
  "$PY" "$REPO/bench/toolchain_build.py" --compare "$BENCH_COMPARE" --variant "$BENCH_VARIANT" --source "$SOURCE" \
    --jobs "$JOBS" --out "$OUT" \
    --base "$WORK/bench" --cache "$WORK/cache" "${extra[@]}" --offline "$OFFLINE" --no-urls --no-apt
}
if ((BENCH)); then step bench-toolchain bench_toolchain; fi

((FAILED)) && exit 1
exit 0
