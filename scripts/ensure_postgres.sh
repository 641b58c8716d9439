#!/bin/sh
# The store's tests run against a real PostgreSQL server (initdb into a temporary folder): install
# Debian's server package with apt when no initdb is found. Fails (it never skips) when it cannot.
set -e
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
    exit 0
fi
sh "$(dirname "$0")/apt_install.sh" "PostgreSQL's server (initdb, pg_ctl)" postgresql
