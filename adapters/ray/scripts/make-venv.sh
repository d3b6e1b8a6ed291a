#!/usr/bin/env bash
# Create .venv-ray at the repository root: Ray Serve (ray[serve], CPU wheels from the package
# index, no CUDA) plus schedkit, its plugins and this adapter (editable).
# Idempotent: a stamp file records a finished install; delete .venv-ray to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${RAY_VENV:-$ROOT/.venv-ray}"
PY="${PY:-python3}"
RAY_DIST="${RAY_DIST:-ray[serve]==2.60.0}"
STAMP="$VENV/.installed"

# schedkit, its plugins and the adapter are reinstalled (seconds) whenever a pyproject.toml
# changes (a new dependency of schedkit's, say); Ray is installed only once.
cd "$ROOT"
DEPS="$(cat pyproject.toml adapters/ray/pyproject.toml plugins/*/pyproject.toml | sha1sum | cut -c1-12)"
WANT="$RAY_DIST $DEPS"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
start=$(date +%s)
install_schedkit() {
    extra=()
    for p in plugins/*/pyproject.toml; do extra+=(-e "$(dirname "$p")"); done
    "$VENV/bin/pip" install -q -e . -e adapters/ray "${extra[@]}" pytest mypy ruff
    echo "$WANT" > "$STAMP"
}
if [[ -f "$STAMP" && "$(cut -d' ' -f1 "$STAMP")" == "$RAY_DIST" ]]; then
    install_schedkit
    echo "make-venv: $VENV: schedkit reinstalled in $(( $(date +%s) - start )) s"
    exit 0
fi

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "$RAY_DIST" aiohttp
install_schedkit
echo "make-venv: $VENV ready in $(( $(date +%s) - start )) s"
