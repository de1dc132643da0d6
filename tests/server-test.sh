#!/usr/bin/env bash
# Integration tests of `promptkv serve` with the official OpenAI Python client,
# against servers the tests start on loopback. Ends with "N passed, N failed".
# usage: tests/server-test.sh [PROMPTKV]     (from the repository root)
# The client lives in .venv-test/ (git-ignored), made from the pinned
# tools/requirements-test.txt when absent or when that file changed.
set -u
bin=${1:-build/promptkv}
venv=.venv-test
reqs=tools/requirements-test.txt

fail_setup() {
    echo "server-test: $*"
    echo "0 passed, 1 failed"
    exit 1
}

tools/install-deps.sh --test || fail_setup "cannot install python3-venv"
stamp="$venv/requirements.sha256"
want=$(sha256sum "$reqs" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "server-test: creating $venv from $reqs"
    rm -rf "$venv"
    python3 -m venv "$venv" || fail_setup "python3 -m venv failed"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs" ||
        fail_setup "pip install -r $reqs failed"
    echo "$want" > "$stamp"
fi

# loopback only: no proxy may see these requests
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
exec "$venv/bin/python" tests/server_test.py "$bin"
