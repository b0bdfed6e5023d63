#!/usr/bin/env bash
# Runs every benchmark (bench/<name>/run.sh BUILD_DIR) in turn. Results go to
# stdout; the figures recorded in docs/PERFORMANCE.md come from these scripts.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
for script in bench/*/run.sh; do
  echo "== $(dirname "$script")"
  bash "$script" "$build"
done
