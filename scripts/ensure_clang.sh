#!/bin/sh
# The sanitized builds (`make sanitize`, `make fuzz`) compile the C with clang, AddressSanitizer and
# UBSan, and need SQLite's headers for the store's modules: install them with apt when missing.
# Fails (it never skips) when they cannot be installed.
set -e
missing=""
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
if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing:$missing, and apt-get is not available: install them first" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
packages=""
for name in $missing; do
    case $name in
    clang) packages="$packages clang" ;;
    libclang-rt-dev)
        # Debian names it by clang's major version (libclang-rt-14-dev on bookworm)
        major=$(clang -dumpversion | cut -d. -f1)
        packages="$packages libclang-rt-$major-dev"
        ;;
    *) packages="$packages $name" ;;
    esac
done
echo "installing$packages with apt-get"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages
if ! command -v clang >/dev/null 2>&1; then
    echo "clang did not install" >&2
    exit 1
fi
major=$(clang -dumpversion | cut -d. -f1)
runtime=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
if [ ! -f "$runtime" ]; then
    echo "installing libclang-rt-$major-dev with apt-get"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "libclang-rt-$major-dev"
fi
