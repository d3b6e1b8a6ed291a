#!/usr/bin/env bash
# Create .venv-sglang at the repository root: a lean CPU install of SGLang plus schedkit
# and this adapter (editable). The full `pip install sglang` pulls CUDA torch (11 GB, 13 min);
# this installs the CPU torch wheel, SGLang without its dependencies, then the pure-Python
# packages it imports (~95 s). sgl_kernel is CUDA-only: schedkit_sglang.cpu (its _cpu_site) stands in
# for it in every process (see adapters/sglang/README.md).
# For prefill/decode pairs (tests/test_pd_pair.py) it adds Mooncake's non-CUDA transfer engine
# (SGLang's mooncake_tcp backend) and, under $VENV/sysroot, the three Debian libraries it links
# (libibverbs, libnl): fetched with `apt-get download` and unpacked, nothing installed system-wide;
# the pair's servers run with LD_LIBRARY_PATH pointing there.
# Idempotent: a stamp file records a finished install; delete .venv-sglang to rebuild.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${SGLANG_VENV:-$ROOT/.venv-sglang}"
PY="${PY:-python3}"
SGLANG_DIST="${SGLANG_DIST:-sglang==0.5.23}"
STAMP="$VENV/.installed"

# schedkit, its plugins and the adapter are reinstalled (seconds) whenever a pyproject.toml
# changes (a new dependency of schedkit's, say); the engine is installed only once.
cd "$ROOT"
DEPS="$(cat pyproject.toml adapters/sglang/pyproject.toml plugins/*/pyproject.toml | sha1sum | cut -c1-12)"
WANT="$SGLANG_DIST $DEPS"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
start=$(date +%s)
install_schedkit() {
    extra=()
    for p in plugins/*/pyproject.toml; do extra+=(-e "$(dirname "$p")"); done
    # opentelemetry: SGLang's request tracing (--enable-trace), tests/test_tracing.py
    "$VENV/bin/pip" install -q -e . -e adapters/sglang "${extra[@]}" pytest hypothesis mypy ruff \
        opentelemetry-sdk opentelemetry-exporter-otlp
    echo "$WANT" > "$STAMP"
}
if [[ -f "$STAMP" && "$(cut -d' ' -f1 "$STAMP")" == "$SGLANG_DIST" ]]; then
    install_schedkit
    echo "make-venv: $VENV: schedkit reinstalled in $(( $(date +%s) - start )) s"
    exit 0
fi

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q --no-deps "$SGLANG_DIST"
"$VENV/bin/pip" install -q "triton~=3.7.0" numpy psutil pydantic "transformers==5.19.0" \
    "tokenizers==0.23.2" orjson msgspec pyzmq requests aiohttp fastapi "uvicorn>=0.51" uvloop \
    setproctitle xxhash pybase64 packaging einops tqdm prometheus-client \
    "sentencepiece==0.2.1" safetensors interegular partial_json_parser python-multipart pillow \
    scipy zstandard "openai==2.8.0" "openai-harmony==0.0.4" pyyaml "python-dateutil<3" distro \
    IPython watchfiles "xgrammar==0.2.7" "llguidance>=1.7.6,<2" "blobfile==3.0.0" gguf tiktoken \
    "compressed-tensors==0.18.0" nvidia-ml-py dill jsonschema "soundfile==0.13.1"
"$VENV/bin/pip" install -q "mooncake-transfer-engine-non-cuda==0.3.13.post1" msgpack
debs="$(mktemp -d)"
libs=(libibverbs1 libnl-3-200 libnl-route-3-200)
# apt-get download needs the package lists; a machine without them gets them first
(cd "$debs" && { apt-get download -qq "${libs[@]}" || { apt-get update -qq && apt-get download -qq "${libs[@]}"; }; })
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$VENV/sysroot"; done
rm -rf "$debs"
install_schedkit
echo "make-venv: $VENV ready in $(( $(date +%s) - start )) s"
