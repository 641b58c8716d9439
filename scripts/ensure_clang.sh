#!/bin/sh
# The sanitized builds (`make sanitize`, `make fuzz`) compile the C with clang, AddressSanitizer and
# UBSan, and need SQLite's headers for the store's modules and Python's own (a distribution's
# Python ships them apart): install them with apt when missing. Fails (it never skips) when they
# cannot be installed. Usage: sh scripts/ensure_clang.sh [the python the modules are built for]
set -e
python=${1:-python3}
missing=""
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$include/Python.h" ] || missing="$missing python-dev"
command -v clang >/dev/null 2>&1 || missing="$missing clang"
if command -v clang >/dev/null 2>&1; then
    # the runtime the sanitized modules need; `clang -print-file-name` echoes the bare name when absent
    runtime=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
    [ -f "$runtime" ] || missing="$missing libclang-rt-dev"
fi
[ -f /usr/include/sqlite3.h ] || missing="$missing libsqlite3-dev"
if [ -z "$missing" ]; then
    exit 0
fi
packages=""
for name in $missing; do
    case $name in
    clang) packages="$packages clang" ;;
    libclang-rt-dev)
        # Debian names it by clang's major version (libclang-rt-14-dev on bookworm)
        major=$(clang -dumpversion | cut -d. -f1)
        packages="$packages libclang-rt-$major-dev"
        ;;
    python-dev) packages="$packages python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev" ;;
    *) packages="$packages $name" ;;
    esac
done
# shellcheck disable=SC2086
sh "$(dirname "$0")/apt_install.sh" "${missing# }" $packages
if ! command -v clang >/dev/null 2>&1; then
    echo "clang did not install" >&2
    exit 1
fi
major=$(clang -dumpversion | cut -d. -f1)
runtime=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
if [ ! -f "$runtime" ]; then
    sh "$(dirname "$0")/apt_install.sh" "clang's sanitizer runtime" "libclang-rt-$major-dev"
fi
