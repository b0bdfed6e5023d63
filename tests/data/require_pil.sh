#!/bin/sh
# Runs the data oracle test (the command in "$@") only when the oracle
# interpreter ($MAESTRO_ORACLE_PYTHON, default /usr/bin/python3) has PIL and
# numpy (python3-pil, python3-numpy); otherwise exits 77, which ctest reports
# as Skipped.
py="${MAESTRO_ORACLE_PYTHON:-/usr/bin/python3}"
if ! "$py" -c 'import PIL, numpy' >/dev/null 2>&1; then
  echo "SKIPPED: $py cannot import PIL and numpy: the data oracle cannot run"
  exit 77
fi
exec "$@"
