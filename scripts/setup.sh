#!/usr/bin/env bash
# Create .venv (if needed) and install the package with its test extras.
# Run by scripts/conformance.sh and .ci/run; everything comes from PyPI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -x "$root/.venv/bin/python" ]; then
  bash "$root/scripts/install-venv.sh"
  python3 -m venv "$root/.venv"
fi
"$root/.venv/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
"$root/.venv/bin/python" -m pip install --quiet -e "$root[test]"
