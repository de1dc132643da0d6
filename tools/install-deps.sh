#!/usr/bin/env bash
# Installs the Debian packages the build needs when they are missing:
#   tools/install-deps.sh          headers and libraries of the server (libmicrohttpd, jansson)
#   tools/install-deps.sh --test   also what the tests need: python3-venv (the server's client tests) and
#                                  Open MPI (the evaluation's two-rank run, `make MPI=1`)
# A no-op when everything is present; uses sudo only when not root.
set -euo pipefail

need=()
[ -f /usr/include/microhttpd.h ] || need+=(libmicrohttpd-dev)
[ -f /usr/include/jansson.h ] || need+=(libjansson-dev)
if [ "${1:-}" = "--test" ]; then
    # ensurepip is what Debian splits into python3-venv
    python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
    command -v mpicc >/dev/null && command -v mpirun >/dev/null || need+=(libopenmpi-dev openmpi-bin)
fi
[ ${#need[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${need[*]}" >&2
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "${need[@]}"
