#!/usr/bin/env bash
# The main job: set up, then crawl the bundled loopback sandbox with the
# example project's settings and check every gate (no network needed).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
cd "$root/example_project"
exec "$root/.venv/bin/scrapy" walsh-demo "$@"
