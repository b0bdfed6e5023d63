#!/usr/bin/env bash
# The path a lent GPU machine takes, up to the GPU: bundle.sh packs this
# build, on_device.sh unpacks it on "another machine" (a fresh folder, the
# programs' libraries from the bundle) and runs run.sh --dry-run there.
# Usage: bench/gpu/on_device_test.sh BUILD   (from the source root)
set -euo pipefail
build=${1:?usage: on_device_test.sh BUILD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash bench/gpu/bundle.sh "$build" "$work/bundle.tar.xz"
bash bench/gpu/on_device.sh "$work/bundle.tar.xz" "$work/out" --dry-run > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
grep -q '^dry run: ok' "$work/out/run.log" || { cat "$work/log"; echo "no 'dry run: ok'"; exit 1; }
grep -q 'library folders:' "$work/out/machine.txt" || { echo "machine.txt incomplete"; exit 1; }
if bash bench/gpu/on_device.sh "$work/missing.tar.xz" "$work/out2" 2> "$work/err"; then echo "a missing bundle was accepted"; exit 1; fi
grep -q 'no bundle' "$work/err"
echo "on_device dry run: ok"
