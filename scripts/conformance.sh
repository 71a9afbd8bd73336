#!/usr/bin/env bash
# The main job: set up (the package and its runtime dependencies only, not
# the test toolchain), then run the conformance check of the example project
# against its bundled loopback sandbox (no network needed). Exit 0 only when
# every MUST of the spec holds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" --runtime
cd "$root/example_project"
exec "$root/.venv/bin/scrapy" walsh-conformance "$@"
