set -e
LLVM=$(python3 -c "import sys;sys.path.insert(0,'/work/main/src');from hermetic.model import record;print(record.load_build_record(__import__('pathlib').Path('/tmp/ag/work/llvm/nvptx/record.json')).install_dir)")
echo "LLVM $LLVM" > /tmp/wab5/times
for side in old new; do
  src=/work/main; [ $side = old ] && src=/tmp/ab-old-s5
  rm -rf /tmp/wab5/$side; mkdir -p /tmp/wab5/$side/cwd
  cd /tmp/wab5/$side/cwd
  s=$(date +%s)
  PYTHONPATH=$src/src python3 -m hermetic wheel $src/src/compiler --llvm "$LLVM" --work-dir /tmp/wab5/$side/work --output /tmp/wab5/$side/dist --root $src --jobs 2 --offline auto > /tmp/wab5/$side/out.json 2> /tmp/wab5/$side/err.log
  echo "$side $(git -C $src rev-parse --short HEAD) $(( $(date +%s) - s )) s" >> /tmp/wab5/times
  sha256sum /tmp/wab5/$side/dist/*.whl >> /tmp/wab5/times
done
