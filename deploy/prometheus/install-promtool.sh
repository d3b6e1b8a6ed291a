#!/usr/bin/env bash
# promtool, for the rules' unit tests (tests/test_observability.py): Debian's prometheus
# package, installed once when missing (measured: ~13 s). `make test` runs this first; CI
# runs as root. Only promtool is used; no Prometheus server is started.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "promtool is missing and this user cannot install packages;" >&2
    echo "as root run: apt-get update && apt-get install -y prometheus" >&2
    exit 1
fi
echo "installing Debian's prometheus for promtool (once, ~15 s)"
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends prometheus
echo "promtool installed in $(( $(date +%s) - start )) s: $(promtool --version 2>&1 | head -1)"
