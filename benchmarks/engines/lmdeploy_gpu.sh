#!/usr/bin/env bash
# LMDeploy's real engine with schedkit policies, on a machine with an NVIDIA GPU (LMDeploy
# has no CPU engine, so this project's CPU machines never run it). From the repository root:
#
#   MODEL=Qwen/Qwen2.5-0.5B-Instruct benchmarks/engines/lmdeploy_gpu.sh [OUT_DIR]
#
# 1. builds .venv-lmdeploy-gpu: the full `lmdeploy==0.18.0` (CUDA torch) plus schedkit, its
#    plugins and this adapter;
# 2. starts two servers with `schedkit serve lmdeploy`: fcfs on port 23401, priority+lfu
#    on 23402, and waits until both answer /v1/models;
# 3. sends one request with a tenant header and a `schedkit` body object, which must
#    complete normally, and checks that the server log shows schedkit's activation;
# 4. runs the live A/B (`schedkit bench --engine openai`) of the two servers on
#    two-tenant-flood, writing results.json and report.html to OUT_DIR/live;
# 5. stops the servers. Server logs: OUT_DIR/server-*.log.
#
# Needs: python3 >= 3.11, a CUDA GPU with room for MODEL twice (0.5B: about 2 x 3 GB with
# --cache-max-entry-count 0.3), network access to PyPI and the model hub (or MODEL a
# local directory). About 10 minutes on a fresh machine, most of it the install.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
OUT="${1:-out/lmdeploy-gpu}"
VENV="${LMDEPLOY_GPU_VENV:-$ROOT/.venv-lmdeploy-gpu}"
PY="${PY:-python3}"
mkdir -p "$OUT"

if [[ ! -x "$VENV/bin/lmdeploy" ]]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q "lmdeploy==0.18.0"
fi
plugins=()
for p in plugins/*/pyproject.toml; do plugins+=(-e "$(dirname "$p")"); done
"$VENV/bin/pip" install -q -e ".[live]" -e adapters/lmdeploy "${plugins[@]}"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait || true; }
trap cleanup EXIT

start() {  # policy port
    "$VENV/bin/schedkit" serve lmdeploy --policy "$1" -- serve api_server "$MODEL" \
        --server-port "$2" --cache-max-entry-count 0.3 --session-len 4096 \
        > "$OUT/server-$1.log" 2>&1 &
    pids+=($!)
}
start fcfs 23401
start priority+lfu 23402

for port in 23401 23402; do
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break
        sleep 2
    done
    curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null \
        || { echo "server on port $port did not come up; see $OUT/server-*.log" >&2; exit 1; }
done
served="$(curl -s http://127.0.0.1:23402/v1/models | "$VENV/bin/python" -c \
    'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"

# The carrier: the tenant header and the body's schedkit object reach the policy (the
# server logs schedkit's launch line, and the request must complete normally).
curl -sf http://127.0.0.1:23402/v1/chat/completions -H 'content-type: application/json' \
    -H 'x-tenant-id: gold' \
    -d "{\"model\": \"$served\", \"max_tokens\": 16, \"messages\": [{\"role\": \"user\",
         \"content\": \"Say hello.\"}], \"schedkit\": {\"slo_ttft_ms\": 5000}}" \
    | tee "$OUT/carrier.json" | "$VENV/bin/python" -c \
    'import json,sys; r=json.load(sys.stdin); assert r["choices"][0]["finish_reason"] in ("stop","length"), r'
grep -q "schedkit" "$OUT/server-priority+lfu.log" \
    || { echo "the server log does not show schedkit's activation" >&2; exit 1; }

"$VENV/bin/schedkit" bench --engine openai \
    --target http://127.0.0.1:23401 --target http://127.0.0.1:23402 \
    --policy fcfs --policy priority+lfu --model "$served" \
    --workload two-tenant-flood --max-requests 400 --slo-ttft-ms 2000 --out "$OUT/live" --overwrite
echo "lmdeploy_gpu.sh: done; results in $OUT/live (report.html), server logs in $OUT"
