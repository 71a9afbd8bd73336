#!/usr/bin/env bash
# The tests of the fleet's long-term audit log (WALSH_AUDIT_URL) run a real
# PostgreSQL server on loopback, a private cluster each (tests/support/
# postgres_server.py). Install Debian's server binaries when they are missing
# (CI runs as root); only the test suite and the report benchmark call this.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q postgresql >/dev/null 2>&1 \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q postgresql >/dev/null; }
# The package may start a system cluster; the tests start their own.
$sudo service postgresql stop >/dev/null 2>&1 || true
ls /usr/lib/postgresql/*/bin/initdb >/dev/null
