#!/usr/bin/env bash
# Runs a fuzzer: tests/fuzz/run.sh BUILD_DIR SECONDS [fuzz_frontend|fuzz_data|fuzz_repl]
# fuzz_frontend (the .sect front end, the default) seeds from the examples
# (models/) and the invalid-input corpus (tests/invalid/); fuzz_data (WAV
# header and manifest parsers) from tests/fuzz/data_corpus/. The seeds are
# copied into a scratch folder so the fuzzer's new inputs do not land in the
# source tree. Crashing inputs are written to BUILD_DIR as
# fuzz-crash-*; the script exits non-zero when the fuzzer finds one.
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS [fuzz_frontend|fuzz_data|fuzz_repl]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
name=${3:-fuzz_frontend}
fuzzer="$build/tests/fuzz/$name"
if [[ ! -x $fuzzer ]]; then
  echo "$fuzzer not found: configure with clang and -DMAESTRO_FUZZ=ON, build target $name" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
if [[ $name == fuzz_data ]]; then
  cp "$root"/tests/fuzz/data_corpus/* "$work/corpus/"
  cd "$root"  # the manifest inputs name fixtures under tests/data/fixtures
  "$fuzzer" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -artifact_prefix="$build/fuzz-" "$work/corpus"
elif [[ $name == fuzz_repl ]]; then
  cp "$root"/tests/fuzz/repl_corpus/* "$work/corpus/"
  "$fuzzer" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -artifact_prefix="$build/fuzz-" "$work/corpus"
else
  cp "$root"/models/*.sect "$root"/models/common/*.sect "$root"/tests/invalid/*.sect "$work/corpus/"
  "$fuzzer" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
    -dict="$root/tests/fuzz/sect.dict" -artifact_prefix="$build/fuzz-" "$work/corpus"
fi
