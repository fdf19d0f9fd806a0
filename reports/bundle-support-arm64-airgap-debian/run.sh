#!/usr/bin/env bash
# arm64 support rebuilt from its bundle alone: a network namespace, an empty cache, nothing else.
set -uo pipefail
B=/tmp/arm-b; rm -rf $B; mkdir -p $B
cd /work/main
H="env PYTHONPATH=/work/main/src python3 -m hermetic"
echo "== bundle"; $H bundle --variant support --arch arm64 --toolchain zig --output $B/bundle 2>&1 | tail -2
echo "== build, air-gapped"; s=$(date +%s)
cd $B && HERMETIC_CACHE=$B/empty-cache unshare --net env PYTHONPATH=/work/main/src python3 -m hermetic build llvm --bundle $B/bundle --variant support --arch arm64 --toolchain zig --work-dir $B/w --offline require --jobs 2 > $B/build.log 2>&1; echo "exit $? after $(( $(date +%s) - s )) s"
tail -3 $B/build.log
echo "== the empty cache after: $(find $B/empty-cache 2>/dev/null | wc -l) entries"
python3 - <<P
import json,glob
r=json.load(open(glob.glob('$B/w/**/record.json',recursive=True)[0]))
g=json.load(open('/work/main/tests/golden/digests.json'))['digests']['llvm-support-zig-arm64']
print("tree", r['tree']['digest'], "golden", g['tree'], "match" if r['tree']['digest']==g['tree'] else "DIFFER")
print("arch", r.get('arch'), "inputs", r['inputs_digest'][:16])
P
