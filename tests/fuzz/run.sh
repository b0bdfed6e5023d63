#!/usr/bin/env bash
# Fuzzes the .sect front end: tests/fuzz/run.sh BUILD_DIR SECONDS
# The seed corpus is the examples (models/) and the invalid-input corpus
# (tests/invalid/), copied into a scratch folder so the fuzzer's new inputs do
# not land in the source tree. Crashing inputs are written to BUILD_DIR as
# fuzz-crash-*; the script exits non-zero when the fuzzer finds one.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
fuzzer="$build/tests/fuzz/fuzz_frontend"
if [[ ! -x $fuzzer ]]; then
  echo "$fuzzer not found: configure with clang and -DMAESTRO_FUZZ=ON, build target fuzz_frontend" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
cp "$root"/models/*.sect "$root"/models/common/*.sect "$root"/tests/invalid/*.sect "$work/corpus/"
"$fuzzer" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
  -dict="$root/tests/fuzz/sect.dict" -artifact_prefix="$build/fuzz-" "$work/corpus"
