#!/usr/bin/env bash
# Create .venv-lmdeploy at the repository root: a lean CPU install of LMDeploy plus schedkit
# and this adapter (editable). `pip install lmdeploy` pulls CUDA torch, triton, tilelang,
# ray and more; this installs the CPU torch wheel, LMDeploy without its dependencies, then
# only the packages that `lmdeploy.pytorch.paging.scheduler`, `lmdeploy.pytorch.engine.engine`
# and `lmdeploy.pytorch.strategies.ar` import (found by trial). That is enough to drive the
# Scheduler model-less on CPU; the full engine and api_server need more (and a GPU:
# PytorchEngineConfig accepts only cuda/ascend/maca/camb). LMDeploy pins torch<=2.12.1;
# the CPU torch 2.13 wheel imports anyway (pip reports the conflict; it is harmless here).
# Idempotent: a stamp file records a finished install; delete .venv-lmdeploy to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${LMDEPLOY_VENV:-$ROOT/.venv-lmdeploy}"
PY="${PY:-python3}"
LMDEPLOY_DIST="${LMDEPLOY_DIST:-lmdeploy==0.18.0}"
STAMP="$VENV/.installed"

# schedkit, its plugins and the adapter are reinstalled (seconds) whenever a pyproject.toml
# changes (a new dependency of schedkit's, say); the engine is installed only once.
# adapters/lmdeploy/pyproject.toml may not exist yet: then only schedkit and plugins go in.
cd "$ROOT"
ADAPTER=()
PYPROJECTS=(pyproject.toml)
if [[ -f adapters/lmdeploy/pyproject.toml ]]; then
    ADAPTER=(-e adapters/lmdeploy)
    PYPROJECTS+=(adapters/lmdeploy/pyproject.toml)
fi
DEPS="$(cat "${PYPROJECTS[@]}" plugins/*/pyproject.toml | sha1sum | cut -c1-12)"
WANT="$LMDEPLOY_DIST $DEPS"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
start=$(date +%s)
install_schedkit() {
    extra=("${ADAPTER[@]}")
    for p in plugins/*/pyproject.toml; do extra+=(-e "$(dirname "$p")"); done
    # prometheus_client: schedkit's metrics; fastapi, uvicorn, openai: what importing
    # LMDeploy's api_server needs, for the request carrier's tests (no server runs here)
    "$VENV/bin/pip" install -q -e . "${extra[@]}" pytest hypothesis mypy ruff \
        prometheus_client fastapi uvicorn openai
    echo "$WANT" > "$STAMP"
}
if [[ -f "$STAMP" && "$(cut -d' ' -f1 "$STAMP")" == "$LMDEPLOY_DIST" ]]; then
    install_schedkit
    echo "make-venv: $VENV: schedkit reinstalled in $(( $(date +%s) - start )) s"
    exit 0
fi

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q --no-deps "$LMDEPLOY_DIST"
# The scheduler and engine modules need the first line; strategies.ar (ARSequenceStrategy,
# which a model-less Scheduler needs for SequenceMeta) also imports engine.model_agent ->
# guided_process (xgrammar) -> serve parsers (shortuuid).
"$VENV/bin/pip" install -q numpy tqdm pydantic "transformers==5.24.0" mmengine-lite psutil \
    pillow requests pybase64 pyzmq \
    "xgrammar==0.2.9" shortuuid
"$VENV/bin/python" -c 'import lmdeploy.pytorch.engine.engine
from lmdeploy.pytorch.paging.scheduler import Scheduler
from lmdeploy.pytorch.strategies.ar.sequence import ARSequenceStrategy'
install_schedkit
echo "make-venv: $VENV ready in $(( $(date +%s) - start )) s"
