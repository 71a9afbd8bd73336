#!/usr/bin/env bash
# Create .venv (if needed) and install the package: with its test extras
# (the toolchain .ci/run uses: pytest, ruff, mypy, sphinx, twine, ...), or,
# given --runtime, only what the package itself needs (scripts/conformance.sh:
# the conformance check needs nothing else). Everything comes from PyPI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$root[test]"
if [ "${1:-}" = "--runtime" ]; then
  target="$root"
fi
if [ ! -x "$root/.venv/bin/python" ]; then
  bash "$root/scripts/install-venv.sh"
  python3 -m venv "$root/.venv"
fi
"$root/.venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
"$root/.venv/bin/python" -m pip install --quiet -e "$target"
