#!/usr/bin/env bash
# The evidence report's test renders the page in a real browser: headless
# Chromium. Install Debian's when it is missing (CI runs as root); nothing
# but that test needs it.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null; }
command -v chromium >/dev/null
