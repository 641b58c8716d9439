#!/bin/sh
# The page's browser tests drive Debian's chromium through chromedriver: install both with apt
# when either is missing. Fails (it never skips) when they cannot be installed.
set -e
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
sh "$(dirname "$0")/apt_install.sh" "chromium and chromedriver" chromium chromium-driver
