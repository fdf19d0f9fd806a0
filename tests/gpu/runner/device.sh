#!/usr/bin/env bash
# Drive the GPU runner (python3 -m devtools.runner) on a leased device machine whose calls last
# at most 10 minutes: start it detached from a snapshot of the checkout, wait for it across calls,
# and copy its results into $OUT in groups that fit what a call brings back
# (at most 8 files, 16 MiB each, 64 MiB together). The transport only: every step is the runner's.
#
#   device.sh start [WAIT_S] [runner args...]   snapshot, launch detached, then wait up to WAIT_S (default 540)
#   device.sh wait [WAIT_S]                     wait for the done marker; exit 0 when done, 3 when still running
#   device.sh rerun [WAIT_S] [runner args...]   run the runner again with this checkout's devtools/, bench/ and
#                                               tests/gpu/ (hermetic reuses an LLVM build whose record still
#                                               matches its inputs: its step says `done`)
#   device.sh collect main                      report, log, records (nvptx, support), PTX, junit xml,
#                                               wheel record, wheel, bench JSON, llvmlite.tar -> $OUT
#   device.sh collect extra                     wheel-again.json, host-record.json, cold-*/, tilec-bench/ -> $OUT/extra.tar
#   device.sh collect parts [FIRST]             install-tree parts FIRST.. (at most 4 a call) -> $OUT
#   device.sh collect scale                     --scale's report (also a partial one while it runs), log, and
#                                               scale-logs.tar.xz: each run's build.log, record.json,
#                                               ninja log and distcc logs, and times.txt (mtimes of the
#                                               configure's, ninja's and zig's outputs) -> $OUT
#   device.sh collect sign                      --sign-key's second-builder.tar: the image layout but its layers
#                                               (signatures, SBOM, provenance), the in-toto links, the OpenPGP
#                                               lookaside -> $OUT (the image's digest is in report.json)
#   device.sh stash [PART_DIR...]               the bundle parts this call carries (default: .bundle-parts/part-*),
#                                               each checked, copied out of the checkout to $BASE/parts
#   device.sh join                              the stashed parts joined into $BASE/bundle, every blob checked
#                                               against its digest; then start ... --bundle $BASE/bundle
set -uo pipefail

BASE=${HERMETIC_DEVICE_BASE:-/tmp/hr}
SNAP="$BASE/repo"
RUN_OUT="$BASE/out"
LOG="$BASE/runner.log"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)

wait_done() {
  local limit=${1:-540} t0=$SECONDS last=-60
  while ((SECONDS - t0 < limit)); do
    if [[ -f $RUN_OUT/done ]]; then
      echo "== runner done, exit $(cat "$RUN_OUT/done") after waiting $((SECONDS - t0))s"
      tail -n 40 "$LOG"
      return 0
    fi
    if ((SECONDS - last >= 60)); then
      last=$SECONDS
      echo "== $(date -u +%H:%M:%S) waiting: $(grep -E '^\[runner|: \[[0-9]+/[0-9]+\]' "$LOG" 2>/dev/null | tail -n 1)"
    fi
    sleep 5
  done
  echo "== still running after ${limit}s"
  tail -n 5 "$LOG"
  return 3
}

launch() {
  mkdir -p "$BASE"
  # the last run's marker would end the wait at once, before the new runner has removed it
  rm -f "$RUN_OUT/done"
  (cd "$SNAP" && HERMETIC_RUNNER_OUT="$RUN_OUT" HERMETIC_RUNNER_WORK="$BASE/work" PYTHONUNBUFFERED=1 \
    setsid nohup "${PYTHON:-python3}" -m devtools.runner "$@" >"$LOG" 2>&1 </dev/null &)
  echo "== launched python3 -m devtools.runner $* (log $LOG)"
}

snapshot() {
  rm -rf "$SNAP" && mkdir -p "$SNAP"
  (cd "$HERE" && tar --exclude=./.git -cf - .) | tar -C "$SNAP" -xf -
}

copy_limited() {  # copy_limited FILE...: into $OUT, splitting any file over 15 MiB
  local f
  for f in "$@"; do
    [[ -f $f ]] || { echo "missing: $f"; continue; }
    if (($(stat -c %s "$f") > 15 * 1024 * 1024)); then
      split -b 15M -d -a 2 "$f" "$OUT/$(basename "$f").part-"
    else
      cp "$f" "$OUT/"
    fi
  done
}

cmd=${1:-}; shift || true
case $cmd in
  start)
    limit=${1:-540}; shift || true
    echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); $(nproc) cores; python3 $(python3 -V 2>&1)"
    echo "== ptxas $(command -v ptxas || ls /usr/local/cuda/bin/ptxas 2>&1); cmake $(command -v cmake); ninja $(command -v ninja); g++ $(command -v g++)"
    snapshot
    launch "$@"
    wait_done "$limit"
    ;;
  rerun)
    limit=${1:-540}; shift || true
    [[ -f $RUN_OUT/done ]] || { echo "runner still running"; exit 3; }
    for d in devtools bench tests/gpu; do
      rm -rf "${SNAP:?}/$d" && cp -a "$HERE/$d" "$SNAP/$d"
    done
    mv "$LOG" "$LOG.1" 2>/dev/null
    launch "$@"
    wait_done "$limit"
    ;;
  wait)
    wait_done "${1:-540}"
    ;;
  collect)
    : "${OUT:?OUT is not set}"
    case ${1:-main} in
      main)
        cp "$LOG" "$OUT/runner.log"
        shopt -s nullglob
        copy_limited "$RUN_OUT/report.json" "$RUN_OUT/record.json" "$RUN_OUT/support-record.json" \
          "$RUN_OUT/kernel.sm_80.ptx" "$RUN_OUT/junit.xml" "$RUN_OUT/wheel-record.json" "$RUN_OUT"/*.whl \
          "$RUN_OUT"/toolchain-build-*.json "$RUN_OUT"/cross-build-*.json
        # --llvmlite's logs, records, SBOM and provenance in one file (a call brings back at most 8); its wheel
        # stays (its sha256 is in the records and the report)
        llvmlite=("$RUN_OUT"/llvmlite-*)
        if ((${#llvmlite[@]})); then
          (cd "$RUN_OUT" && tar -cf "$OUT/llvmlite.tar" --exclude='*.whl' llvmlite-*) && tar -tvf "$OUT/llvmlite.tar"
        fi
        ls -l "$OUT" "$RUN_OUT"
        ;;
      extra)
        # what --again, --compare-host and --tilec-bench wrote, in one tar
        (cd "$RUN_OUT" && shopt -s nullglob && tar -cf "$OUT/extra.tar" wheel-again.json host-record.json cold-* tilec-bench)
        tar -tvf "$OUT/extra.tar"
        ;;
      scale)
        cp "$LOG" "$OUT/runner.log"
        shopt -s nullglob
        copy_limited "$RUN_OUT"/scale-*.json "$RUN_OUT/report.json"
        local_scale=$BASE/work/scale
        if [[ -d $local_scale ]]; then
          # where a warm build's time goes: file times of the configure's, ninja's and zig's outputs per run
          find "$local_scale" \( -name CMakeCache.txt -o -name build.ninja -o -name .ninja_log -o -name record.json \
            -o -name conan_toolchain.cmake -o -name build.log -o -name 'hermetic-commands.txt' \) -printf '%T@ %s %p\n' \
            | sort -n >"$local_scale/times.txt"
          find "$local_scale" -path '*zig-cache*' -type f \( -name '*.a' -o -name '*.so*' -o -name '*.o' \) \
            -printf '%T@ %s %p\n' | sort -n >"$local_scale/zig-cache-times.txt"
          (cd "$local_scale" && find . \( -name build.log -o -name record.json -o -name .ninja_log -o -name 'distcc*.log' \
            -o -name times.txt -o -name zig-cache-times.txt \) -print0 | tar --null -T - -cf - | xz -T0 -6 >"$OUT/scale-logs.tar.xz")
          tar -tvJf "$OUT/scale-logs.tar.xz" | awk '{print $3, $6}'
        fi
        ls -l "$OUT"
        ;;
      sign)
        (cd "$RUN_OUT" && shopt -s nullglob && tar -cf "$OUT/second-builder.tar" signed evidence lookaside)
        tar -tvf "$OUT/second-builder.tar" | awk '{print $3, $6}'
        ;;
      parts)
        first=${2:-0}
        shopt -s nullglob
        parts=("$RUN_OUT"/llvm-*-install.tar.xz.part-*)
        cp "${parts[@]:first:4}" "$OUT/"
        cp "$RUN_OUT"/llvm-*-install.parts.sha256 "$OUT/" 2>/dev/null
        echo "== ${#parts[@]} parts in all; copied from $first"
        ls -l "$OUT"
        ;;
    esac
    ;;
  stash)
    # parts are ignored paths: gone in the next call unless copied out of the checkout now
    shopt -s nullglob
    given=()
    for p in "$@"; do given+=("$(realpath -m "$p")"); done
    (($#)) || given=("$HERE"/.bundle-parts/part-*)
    ((${#given[@]})) || { echo "no bundle part in this call: carry .bundle-parts/part-NN-of-MM and stash it"; exit 2; }
    (cd "$HERE" && "${PYTHON:-python3}" -m devtools.runner.parts stash "${given[@]}" --into "$BASE/parts") || exit
    ls "$BASE"/parts/*/
    ;;
  join)
    (cd "$HERE" && "${PYTHON:-python3}" -m devtools.runner.parts join --from "$BASE/parts" --output "$BASE/bundle")
    ;;
  *)
    sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 2 ;;
esac
