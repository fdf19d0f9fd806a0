#!/usr/bin/env bash
# Write what a runner without Debian's redis-server, ccache, distcc and docker-registry needs to run
# bench/scale_bench.py: DIR/scale-tools.tar.xz holding libexec/ (this machine's binaries), lib/ (every
# shared library they load but glibc's own, so that another distribution's libraries are never mixed
# in) and bin/ (one wrapper each, which runs its binary with LD_LIBRARY_PATH=lib: the build's sandbox
# passes no LD_LIBRARY_PATH on, so the variable is set by the wrapper, for that binary only).
# `python3 -m devtools.runner --scale` unpacks it and puts bin/ first on PATH. DIR is git-ignored when it
# is .scale.
#
#   tests/gpu/runner/scale-carry.sh [DIR]     (.scale)
set -euo pipefail
dir=${1:-.scale}
# name in bin/ = the file it runs: redis-server is Debian's redis-check-rdb, which acts by its name
declare -A tools=([redis-server]=/usr/bin/redis-check-rdb [ccache]=/usr/bin/ccache [distcc]=/usr/bin/distcc
                  [distccd]=/usr/bin/distccd [docker-registry]=/usr/bin/docker-registry)
# glibc's libraries: the runner's own are newer, and mixing two glibcs fails
glibc='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl)\.so'
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/libexec" "$stage/lib" "$dir"
for name in "${!tools[@]}"; do
  exe=${tools[$name]}
  [[ -x $exe ]] || { echo "scale-carry: $exe is missing: apt-get install -y redis-server ccache distcc docker-registry" >&2; exit 1; }
  cp "$exe" "$stage/libexec/$name"
  ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
    [[ $soname =~ $glibc ]] || cp -L "$path" "$stage/lib/$soname"
  done
  cat >"$stage/bin/$name" <<EOF
#!/bin/sh
d=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")
LD_LIBRARY_PATH="\$d/lib" exec "\$d/libexec/$name" "\$@"
EOF
  chmod 755 "$stage/bin/$name"
done
dpkg-query -W -f '${Package} ${Version}\n' redis-server redis-tools ccache distcc docker-registry >"$stage/versions.txt"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$stage" -cf - bin libexec lib versions.txt \
  | xz -T1 -6 >"$dir/scale-tools.tar.xz"
ls -l "$dir/scale-tools.tar.xz"
tar -tvf "$dir/scale-tools.tar.xz" | awk '{print $3, $6}'
