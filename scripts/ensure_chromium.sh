#!/bin/sh
# The page's browser tests drive Debian's chromium through chromedriver: install both with apt
# when either is missing. Fails (it never skips) when they cannot be installed.
set -e
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium and chromedriver are missing and apt-get is not available: install them first" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
echo "installing chromium and chromium-driver with apt-get"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
