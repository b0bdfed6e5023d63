#!/usr/bin/env bash
# Installs every Debian bookworm package Maestro builds, tests or benchmarks
# with. Idempotent: installs only what is missing, and runs `apt-get update`
# once, only when something is missing. The CUDA toolkit is not a Debian
# package: when present in the standard prefix it is used for GPU device
# detection and to build the CUDA backend (src/gpu/cuda, needs nvcc).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  libcaf-dev                       # actors (the in-process runtime)
  antlr4 libantlr4-runtime-dev     # grammar tool (build time) and runtime
  libtomlplusplus-dev              # runtime config
  libboost-test-dev                # unit tests
  nlohmann-json3-dev               # JSON
  libcli11-dev                     # command lines
  libfmt-dev                       # formatting
  libopenblas-dev                  # CPU sgemm
  libibverbs-dev                   # RDMA device detection (src/rdma/devices.h); transfers go through UCX
  python3 python3-torch python3-numpy  # the test oracle (Debian's /usr/bin/python3)
  graphviz                         # tests that `dot` accepts --print dot
  clang libclang-rt-14-dev         # libFuzzer target, sanitizers
  libstb-dev                       # PNG/JPEG decoding (stb_image) for files(manifest)
  libfftw3-dev                     # the log-mel spectrogram's FFT (single precision)
  python3-pil                      # the image oracle (PIL's bicubic resize)
  libedit-dev tmux                 # the debug REPL's line editing; its terminal test
  libucx-dev ucx-utils             # the transfer engine (UcxTransport) and ucx_perftest (bench/transport)
  iproute2                         # `ip netns` + veth: the multi-host tests (tests/netns)
  xz-utils                         # bench/gpu/bundle.sh's tar.xz (test bench.gpu_bundle)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
