#!/usr/bin/env bash
# The next vLLM release in one command (`make test-vllm-next`): install the newest vllm on
# the package index into its own venv (.venv-vllm-next) and run the adapter's model-less
# suites against it, ending with a pass/fail summary that names what broke.
#
#   VLLM_NEXT=0.35.0      test that version instead of the newest
#   VLLM_OVERRIDE=...     replace pins the wheel declares but the index lacks (make-venv.sh);
#                         known ones for a version are applied unless this is set
#
# A version outside schedkit_vllm's SUPPORTED runs with SCHEDKIT_VLLM_UNSUPPORTED set to
# it, the adapter's loud override: this script says so first, in a banner. Not part of
# `make test` (it downloads ~10 GB the first time); the lanes of tested versions are.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$ROOT"
VENV="${VLLM_VENV:-.venv-vllm-next}"
PY="${PY:-python3}"

# pins of a release the index cannot satisfy, and what replaces them (verified by hand)
declare -A KNOWN_OVERRIDES=(
    [0.34.0]="flashinfer-python==0.7.4"  # its x86_64 wheel pins 0.7.3, absent from the index
)

version="${VLLM_NEXT:-}"
if [[ -z "$version" ]]; then
    version="$("$PY" -m pip index versions vllm 2>/dev/null | sed -n 's/^vllm (\(.*\))$/\1/p')"
fi
if [[ -z "$version" ]]; then
    echo "test-vllm-next: the package index lists no vllm release (pip index versions vllm);" \
        "set VLLM_NEXT=X.Y.Z to test one" >&2
    exit 2
fi
override="${VLLM_OVERRIDE-${KNOWN_OVERRIDES[$version]:-}}"

echo "test-vllm-next: installing vllm==$version into $VENV${override:+ (pins overridden: $override)}"
if ! VLLM_DIST="vllm==$version" VLLM_OVERRIDE="$override" VLLM_VENV="$VENV" \
        adapters/vllm/scripts/make-venv.sh; then
    echo "test-vllm-next: FAILED to install vllm==$version: see pip's message above. A pin the" \
        "index cannot satisfy is replaced with VLLM_OVERRIDE='pkg==version' (make-venv.sh)." >&2
    exit 1
fi

supported="$("$VENV/bin/python" -c '
import sys
from schedkit_vllm.compat import SUPPORTED, check_version, UnsupportedVllmError
try:
    check_version(sys.argv[1], environ={})
    print("yes " + SUPPORTED)
except UnsupportedVllmError:
    print("no " + SUPPORTED)
' "$version")"
unsupported_env=()
if [[ "$supported" == no* ]]; then
    unsupported_env=(SCHEDKIT_VLLM_UNSUPPORTED="$version")
    cat <<EOF
##############################################################################
# test-vllm-next: vLLM $version is NOT in schedkit_vllm's supported range
# (${supported#no }). The suites run with SCHEDKIT_VLLM_UNSUPPORTED=$version,
# the override users would need; a pass here is what widening SUPPORTED needs.
##############################################################################
EOF
fi

report="$VENV/next-report.xml"
set +e
env "${unsupported_env[@]}" VLLM_VENV="$VENV" adapters/vllm/scripts/test-modelless.sh \
    --junitxml="$report"
status=$?
set -e
"$VENV/bin/python" - "$report" "$version" <<'EOF'
import sys
import xml.etree.ElementTree as ET
from collections import Counter

report, version = sys.argv[1], sys.argv[2]
root = ET.parse(report).getroot()
cases = root.iter("testcase")
passed, broken, skipped = 0, [], 0
for case in cases:
    name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
    outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
    if outcome in ("failure", "error"):
        message = next(c for c in case if c.tag == outcome).get("message", "")
        broken.append((name, message.splitlines()[0][:160] if message else outcome))
    elif outcome == "skipped":
        skipped += 1
    else:
        passed += 1
print("=" * 78)
print(f"test-vllm-next: vLLM {version}: {passed} passed, {len(broken)} broke, {skipped} skipped")
by_file = Counter(name.split("::")[0] for name, _ in broken)
for file, count in by_file.most_common():
    print(f"  {count:4d} broke in {file}")
for name, message in broken:
    print(f"  BROKE {name}: {message}")
print("=" * 78)
EOF
exit $status
