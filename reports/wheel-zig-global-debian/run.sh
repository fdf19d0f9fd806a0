set -e
LLVM=$(python3 -c "import sys;sys.path.insert(0,'/work/main/src');from hermetic.model import record;print(record.load_build_record(__import__('pathlib').Path('/tmp/c-w1/llvm/support/record.json')).install_dir)")
for side in old new; do
  src=/work/main; [ $side = old ] && src=/tmp/ab-old
  rm -rf /tmp/wab/$side; mkdir -p /tmp/wab/$side/cwd
  cd /tmp/wab/$side/cwd
  s=$(date +%s)
  PYTHONPATH=$src/src python3 -m hermetic wheel $src/tests/functional/projects/llvmprobe --llvm "$LLVM" --work-dir /tmp/wab/$side/work --output /tmp/wab/$side/dist --root $src --jobs 2 --offline auto > /tmp/wab/$side/out.json 2> /tmp/wab/$side/err.log
  echo "$side $(( $(date +%s) - s )) s" >> /tmp/wab/times
  sha256sum /tmp/wab/$side/dist/*.whl >> /tmp/wab/times
done
