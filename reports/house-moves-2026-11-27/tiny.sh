#!/bin/bash
# usage: tiny.sh ROOT TAG : builds tiny support with zig, host, and zig arm64; prints tree digests
set -e
ROOT=$1; TAG=$2
M=/tmp/benv-logs/tiny-mirror
if [ ! -d $M ]; then mkdir -p $M; (cd $ROOT/tests/recipes && PYTHONPATH=$ROOT/src python3 -c "import tiny_archive, pathlib; tiny_archive.write(pathlib.Path('$M'))"); fi
for tc in zig host zig-arm64 zig-ccache; do
  W=/tmp/benv-logs/tiny-$TAG-$tc; rm -rf $W; mkdir -p $W
  extra=(); t=$tc
  [ $tc = zig-arm64 ] && { extra=(--arch arm64); t=zig; }
  [ $tc = zig-ccache ] && { mkdir -p /tmp/benv-logs/ccache-$TAG; extra=(--compile-cache file:///tmp/benv-logs/ccache-$TAG); t=zig; }
  (cd $W && PYTHONPATH=$ROOT/src nice -n 10 python3 -m hermetic build llvm --root $ROOT --llvm-recipe $ROOT/tests/recipes/tiny --mirror $M \
     --variant support --toolchain $t "${extra[@]}" --work-dir $W --cache $HOME/.cache/hermetic --jobs 2 --offline auto --quiet > $W.out 2>&1) || { echo "$tc FAILED"; tail -20 $W.out; continue; }
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['tree']['digest'], r['inputs_digest'][:16])" $(ls $W/*/*/record.json $W/*/record.json 2>/dev/null | head -1) $tc
done
