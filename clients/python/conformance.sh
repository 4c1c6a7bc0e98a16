#!/usr/bin/env bash
# Hooks for scripts/conformance (docs/conformance.md):
#   conformance.sh vectors       the shared decision vectors with pytest
#   conformance.sh elector-cmd   prepare the venv (output to stderr), print the elector command
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
prepare() {
  if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall .
}
case "${1:-}" in
  vectors)
    prepare >&2
    exec .venv/bin/python -m pytest -p no:cacheprovider -q tests/test_vectors.py
    ;;
  elector-cmd)
    prepare >&2
    echo "$here/.venv/bin/python $here/tests/conformance_elector.py"
    ;;
  *)
    echo "usage: conformance.sh vectors|elector-cmd" >&2
    exit 2
    ;;
esac
