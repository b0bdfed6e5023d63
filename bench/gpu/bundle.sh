#!/usr/bin/env bash
# Packs a build's GPU programs for a GPU machine that has the NVIDIA driver
# and CUDA libraries but not this project's Debian packages (CAF, ANTLR,
# OpenBLAS, UCX, ...): maestro-run, bench_gpu and test_gpu, stripped, in
# run.sh's folder layout, with every shared library they load except the C
# and C++ runtimes (the machine's own) and NCCL (218 MB: the machine's). The
# C runtime of this machine goes in glibc/, for a machine whose C library is
# older than the one the programs were linked against. cuBLAS(Lt) is opened
# at run time (gpu/cuda/cublas_library.h) and comes from the machine too.
#
# Usage: bench/gpu/bundle.sh BUILD OUT.tar.xz
# There: tar -xJf OUT.tar.xz -C DIR, then
#   LD_LIBRARY_PATH=DIR/lib:<folders of libcublasLt.so.13, libnccl.so.2> \
#     bench/gpu/run.sh --no-build --build DIR
set -euo pipefail
build=${1:?usage: bundle.sh BUILD OUT.tar.xz} out=${2:?usage: bundle.sh BUILD OUT.tar.xz}
progs=(maestro-run bench/bench_gpu tests/gpu/test_gpu)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/glibc"
for p in "${progs[@]}"; do
  [ -x "$build/$p" ] || { echo "bundle.sh: error: $build/$p is missing (build with the CUDA toolkit)" >&2; exit 2; }
  mkdir -p "$stage/$(dirname "$p")"
  strip -o "$stage/$p" "$build/$p"
done
# The shared libraries, by the loader's own resolution (ldd), sorted by kind.
for p in "${progs[@]}"; do ldd "$build/$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      libnccl.so*) ;;                                            # the GPU machine's
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|libstdc++.so*|libmvec.so*)
        cp -L "$path" "$stage/glibc/$name" ;;
      *) cp -L "$path" "$stage/lib/$name"
         strip --strip-unneeded "$stage/lib/$name" 2>/dev/null || true ;;  # a library strip cannot read stays as it is
    esac
  done
cp -L "$(ldd "$build/maestro-run" | awk '/ld-linux/ {print $1}')" "$stage/glibc/ld-linux-x86-64.so.2"
tar -C "$stage" -cJf "$out" .
echo "bundle.sh: $out ($(du -h "$out" | cut -f1)): $(cd "$stage" && find . -type f | wc -l) files"
