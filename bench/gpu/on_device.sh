#!/usr/bin/env bash
# The GPU-side half of running bench/gpu/run.sh on a machine that has CUDA
# (and perhaps PyTorch) but none of this project's Debian packages — the
# lent machines (docs/gpu.md, "Running it on a GPU"). Unpacks a bundle made
# here by bench/gpu/bundle.sh, finds the machine's cuBLAS(Lt) and NCCL,
# runs the programs through the bundle's C runtime when the machine's is
# older, and runs every check of run.sh into OUT (its report, its log and
# what the machine is); optionally `maestro-run --calibrate` and a
# per-kernel GPU time profile (ncu) of a 2-layer step of the 1.3B shape.
#   bench/gpu/on_device.sh BUNDLE.tar.xz OUT [--timeout S] [--step-timeout S]
#                          [--only REGEX] [--calibrate] [--profile] [--dry-run]
# (from the source root; --dry-run: run.sh's plan, no GPU needed.)
set -uo pipefail
bundle=${1:?usage: on_device.sh BUNDLE.tar.xz OUT [options]}
out=${2:?usage: on_device.sh BUNDLE.tar.xz OUT [options]}
shift 2
timeout_s=540 step_timeout=90 calibrate=0 profile=0 dry=() only=()
while [ $# -gt 0 ]; do
  case $1 in
    --timeout) timeout_s=$2; shift ;;
    --step-timeout) step_timeout=$2; shift ;;
    --only) only=(--only "$2"); shift ;;  # run.sh's steps whose names match
    --calibrate) calibrate=1 ;;
    --profile) profile=1 ;;
    --dry-run) dry=(--dry-run) ;;
    *) echo "on_device.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -f "$bundle" ] || { echo "on_device.sh: no bundle $bundle" >&2; exit 2; }
mkdir -p "$out" || exit 2
b=$(mktemp -d /tmp/maestro-bundle.XXXXXX)
tar -xJf "$bundle" -C "$b" || { echo "on_device.sh: cannot unpack $bundle" >&2; exit 2; }

machine=$out/machine.txt
{ date -u; nvidia-smi; head -2 /etc/os-release; ldd --version | head -1; nproc; uptime
  command -v python3 compute-sanitizer nvcc ncu; } > "$machine" 2>&1
# cuBLAS(Lt) 13 and NCCL 2: the CUDA prefix, or a PyTorch environment's nvidia/ wheels.
libdirs=$(find /usr/local /opt /usr/lib /usr/lib64 -xdev \( -name 'libcublasLt.so.13' -o -name 'libcublas.so.13' \
  -o -name 'libnccl.so.2' \) 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
echo "library folders: $libdirs" >> "$machine"
export LD_LIBRARY_PATH=$b/lib:$libdirs${LD_LIBRARY_PATH:-}
if ldd "$b/maestro-run" "$b/bench/bench_gpu" | grep -q 'not found'; then
  # An older C library than the build's: each program through the bundle's loader.
  echo "through the bundle's C runtime:" >> "$machine"
  ldd "$b/maestro-run" | grep 'not found' >> "$machine"
  for p in maestro-run bench/bench_gpu tests/gpu/test_gpu; do
    mv "$b/$p" "$b/$p.real"
    printf '#!/bin/sh\nexec %s/glibc/ld-linux-x86-64.so.2 --library-path %s/glibc:%s %s.real "$@"\n' \
      "$b" "$b" "$LD_LIBRARY_PATH" "$b/$p" > "$b/$p"
    chmod +x "$b/$p"
  done
fi
ldd "$b/maestro-run" >> "$machine" 2>&1
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1 TORCH_PYTHON=${TORCH_PYTHON:-python3}

timeout -k 5 "$timeout_s" bash bench/gpu/run.sh --no-build --build "$b" --report "$out/gpu-report.md" \
  --step-timeout "$step_timeout" "${only[@]}" "${dry[@]}" 2>&1 | tee "$out/run.log"
status=${PIPESTATUS[0]}
if [ $calibrate = 1 ] && [ ${#dry[@]} = 0 ]; then
  printf '[runtime]\nbackend = "cuda"\n' > "$b/cuda.toml"
  timeout -k 5 120 "$b/maestro-run" --calibrate "$out/calibrated.toml" --config "$b/cuda.toml" > "$out/calibrate.log" 2>&1
  echo "calibrate: exit $?" >> "$out/calibrate.log"
fi
if [ $profile = 1 ] && [ ${#dry[@]} = 0 ]; then
  # GPU time per kernel launch of one step (docs/PERFORMANCE.md §6 sums it by kernel family).
  timeout -k 5 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    "$b/bench/bench_gpu" step --layers 2 --hidden 2048 --heads 16 --ffn 5504 --vocab 32000 --samples 2 \
    --tokens 2048 --steps 1 --warmup 1 > "$out/ncu.csv" 2> "$out/ncu.err"
  echo "ncu: exit $?" >> "$out/ncu.err"
fi
rm -rf "$b"
exit "$status"
