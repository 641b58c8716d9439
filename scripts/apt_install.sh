#!/bin/sh
# Installs Debian packages with apt-get for the ensure_*.sh scripts, as root or through `sudo -n`.
# Fails, naming what is missing, when apt-get is not available.
# Usage: sh scripts/apt_install.sh "what is missing" package...
set -e
what=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: $what; apt-get is not available: install it first" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
echo "installing $* with apt-get"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
