#!/bin/sh
# Runs an oracle test (the command in "$@") only when the PyTorch oracle can
# run; otherwise exits 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE,
# cmake/MaestroTest.cmake), never as passed. The oracle interpreter is
# $MAESTRO_ORACLE_PYTHON, default Debian's /usr/bin/python3 (python3-torch):
# point it at a python without torch to see the skip, e.g.
#   MAESTRO_ORACLE_PYTHON=/usr/bin/false ctest --test-dir build -R oracle
# The tests themselves run the oracle with the same interpreter.
py="${MAESTRO_ORACLE_PYTHON:-/usr/bin/python3}"
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "SKIPPED: $py cannot import torch: the PyTorch oracle cannot run"
  exit 77
fi
exec "$@"
