#!/bin/sh
# The store's tests run against a real PostgreSQL server (initdb into a temporary folder): install
# Debian's server package with apt when no initdb is found. Fails (it never skips) when it cannot.
set -e
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL's server (initdb, pg_ctl) is missing and apt-get is not available: install it first" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
echo "installing postgresql with apt-get"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
