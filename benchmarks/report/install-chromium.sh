#!/usr/bin/env bash
# Headless Chromium for the report's browser test (tests/bench/test_report_browser.py) and
# benchmarks/report/screenshot.py: Debian's package, installed once when missing
# (measured: ~15 s, ~115 packages, ~480 MB). `make test` runs this first; CI runs as root.
set -euo pipefail
for name in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$name" >/dev/null 2>&1; then
        exit 0
    fi
done
if [ "$(id -u)" = 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "headless Chromium is missing and this user cannot install packages;" >&2
    echo "as root run: apt-get update && apt-get install -y chromium" >&2
    exit 1
fi
echo "installing Debian's chromium for the report's browser test (once, ~15 s)"
export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q chromium
echo "chromium installed in $(( $(date +%s) - start )) s: $(chromium --version 2>/dev/null)"
