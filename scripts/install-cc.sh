#!/usr/bin/env bash
# The tests of a stepped Redis clock build a small LD_PRELOAD shim
# (scrapy_walsh_research/sandbox/stepclock.c) with the C compiler. Install
# Debian's when it is missing (CI runs as root); nothing outside those tests
# needs one.
set -euo pipefail
if command -v cc >/dev/null 2>&1 && [ -e /usr/include/time.h ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q gcc libc6-dev >/dev/null 2>&1 \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q gcc libc6-dev >/dev/null; }
command -v cc >/dev/null
