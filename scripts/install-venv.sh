#!/usr/bin/env bash
# `python3 -m venv` needs ensurepip, which Debian ships apart from python3
# (python3-venv). Install it when missing (as root, or with sudo); run by
# scripts/setup.sh before it makes .venv.
set -euo pipefail
if python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  sudo="sudo"
fi
version="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
export DEBIAN_FRONTEND=noninteractive
packages="python3-venv python${version}-venv"
# shellcheck disable=SC2086
$sudo apt-get install -y -q $packages >/dev/null 2>&1 \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q $packages >/dev/null; }
python3 -c 'import ensurepip, venv'
