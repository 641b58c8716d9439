#!/bin/sh
# `make test` holds the build to every compiled helper (setup.py builds them optionally, for a
# user's install): install what the builds need with apt when missing, a C compiler, Python's
# headers (a distribution's Python ships them apart), SQLite's (the row writer, serve's intake) and
# zlib's (the row writer, the raw events' compression). Fails (it never skips) when it cannot.
# Usage: sh scripts/ensure_build_deps.sh [the python the modules are built for]
set -e
python=${1:-python3}
missing=""
packages=""
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
compiler=$("$python" -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')
if ! command -v "$compiler" >/dev/null 2>&1; then
    missing="$missing $compiler"
    packages="$packages gcc"
fi
if [ ! -f "$include/Python.h" ]; then
    missing="$missing Python.h"
    packages="$packages python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev"
fi
if [ ! -f /usr/include/sqlite3.h ]; then
    missing="$missing sqlite3.h"
    packages="$packages libsqlite3-dev"
fi
if [ ! -f /usr/include/zlib.h ]; then
    missing="$missing zlib.h"
    packages="$packages zlib1g-dev"
fi
if [ -z "$missing" ]; then
    exit 0
fi
# shellcheck disable=SC2086
sh "$(dirname "$0")/apt_install.sh" "${missing# }" $packages
