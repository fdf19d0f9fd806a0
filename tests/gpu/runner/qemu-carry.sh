#!/usr/bin/env bash
# Write what a runner without Debian's qemu-user-static and libc6-ARCH-cross needs to run
# a cross build's test_package: DIR/qemu-ARCH.tar.xz holding bin/qemu-QARCH-static (static,
# runs on any x86_64 Linux) and usr/TRIPLE (the cross loader and glibc), from this machine's
# Debian packages. The runner's --qemu DIR unpacks it. DIR is git-ignored when it is .qemu.
#
#   tests/gpu/runner/qemu-carry.sh [ARCH] [DIR]     (arm64, .qemu)
set -euo pipefail
arch=${1:-arm64}
dir=${2:-.qemu}
case $arch in
  arm64) qarch=aarch64; triple=aarch64-linux-gnu; pkgs="qemu-user-static libc6-arm64-cross" ;;
  amd64) qarch=x86_64; triple=x86_64-linux-gnu; pkgs="qemu-user-static libc6-amd64-cross" ;;
  *) echo "qemu-carry: no cross run for $arch (amd64 or arm64)" >&2; exit 2 ;;
esac
qemu=/usr/bin/qemu-$qarch-static
if [[ ! -x $qemu || ! -d /usr/$triple ]]; then
  echo "qemu-carry: $qemu or /usr/$triple is missing: apt-get install -y $pkgs" >&2
  exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/usr" "$dir"
cp "$qemu" "$stage/bin/"
cp -a "/usr/$triple" "$stage/usr/"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$stage" -cf - bin usr \
  | xz -T1 -6 >"$dir/qemu-$arch.tar.xz"
ls -l "$dir/qemu-$arch.tar.xz"
