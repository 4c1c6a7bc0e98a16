#!/usr/bin/env bash
# Python client: pinned dev dependencies in clients/python/.venv, mypy --strict on the package,
# then the whole pytest suite (real redis-server processes with the module loaded).
#   clients/python/test.sh [pytest args]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
# Installed (not editable) so that `pip install .` is exercised; pytest imports the source tree.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall .
echo "== mypy --strict redis_lease (+ the conformance elector)"
.venv/bin/python -m mypy --strict redis_lease tests/conformance_elector.py
echo "== mypy --strict on the README example"
example=$(mktemp -d)
trap 'rm -rf "$example"' EXIT
.venv/bin/python tests/readme_example.py > "$example/readme_example.py"
.venv/bin/python -m mypy --strict --no-incremental "$example/readme_example.py"
.venv/bin/python tests/readme_example.py 1 > "$example/readme_async_example.py"
.venv/bin/python -m mypy --strict --no-incremental "$example/readme_async_example.py"
echo "== pytest"
# -p no:cacheprovider: no .pytest_cache written into the source tree.
.venv/bin/python -m pytest -p no:cacheprovider -q "$@"
