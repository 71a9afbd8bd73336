#!/usr/bin/env bash
# The tests of the shared (Redis) state run a real redis-server on loopback.
# Install Debian's when it is missing (CI runs as root); the embedded default
# needs no server, so only the test suite and the multi-process benchmark call this.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q redis-server >/dev/null 2>&1 \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q redis-server >/dev/null; }
# The package may start a system service; the tests start their own servers.
$sudo service redis-server stop >/dev/null 2>&1 || true
command -v redis-server >/dev/null
