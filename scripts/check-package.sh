#!/usr/bin/env bash
# The package as users get it: build the sdist and wheel, check their
# metadata with twine, install the wheel (not the checkout) into fresh
# virtual environments and run the conformance check from each: once with the
# newest releases of every dependency, once with the minimum versions
# pyproject.toml declares (.ci/constraints-floors.txt). A wheel that lost its
# schema, its py.typed or an entry point, or a floor that no longer works,
# fails here. Run by .ci/run; needs the project's .venv (scripts/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/walsh-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# the sdist first and the wheel from it (python -m build's default): a wheel
# built from the checkout would also pack a stale build/lib left there
"$root/.venv/bin/python" -m build --outdir "$work/dist" "$root" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; exit 1; }
"$root/.venv/bin/twine" check --strict "$work"/dist/*
wheel="$(ls "$work"/dist/*.whl)"
# what the wheel must carry besides the code
for member in scrapy_walsh_research/py.typed scrapy_walsh_research/core/blocklist/blocklist.schema.json; do
  python3 -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' \
    "$wheel" "$member" || { echo "the wheel lacks $member" >&2; exit 1; }
done

# exactly the package's modules: none missing, none left over from an old layout
(cd "$root" && git ls-files 'scrapy_walsh_research/*.py') | python3 -c '
import sys, zipfile
tracked = set(sys.stdin.read().split())
packed = {n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".py")}
for name, what in ((tracked - packed, "lacks"), (packed - tracked, "has stale")):
    if name:
        sys.exit(f"the wheel {what} {sorted(name)}")
' "$wheel"

run_conformance() {  # $1: a name, then pip arguments
  local name="$1"; shift
  python3 -m venv "$work/$name"
  "$work/$name/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$work/$name/bin/python" -m pip install --quiet "$@" "$wheel[redis]" >"$work/$name.pip" 2>&1 \
    || { cat "$work/$name.pip"; exit 1; }
  echo "== conformance check from the wheel ($name: scrapy $("$work/$name/bin/python" -c \
    'import scrapy; print(scrapy.__version__)'))"
  # from example_project, as a user runs it; the checkout is not on sys.path
  if (cd "$root/example_project" && "$work/$name/bin/scrapy" walsh-conformance) \
      >"$work/$name.log" 2>&1; then
    grep -E "checks passed" "$work/$name.log"
  else
    cat "$work/$name.log"
    exit 1
  fi
}
run_conformance newest
run_conformance floors -c "$root/.ci/constraints-floors.txt"
