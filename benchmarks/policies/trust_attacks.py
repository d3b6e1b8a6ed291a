"""The two-client fairness attack on ``vtc`` through the edge's blind spots of issue #35,
over vLLM's real OpenAI server (trust.md, "Stepping around the edge").

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/policies/trust_attacks.py [--per-client 32]

Each arm launches ``schedkit serve vllm`` with the documented gateway config (``vtc``,
``trust.gateway_secret_header``; the gateway sends ``x-tenant-id`` and the secret) and
``--max-num-seqs 2``, so requests queue. Two clients submit ``--per-client`` equal
requests each, all at once, interleaved. The honest client goes through the gateway
(``x-tenant-id: honest``). The attacker's bodies claim a fresh tenant per request in
``vllm_xargs``, sent as the arm says:

- ``bom``, ``utf16``, ``utf32``: through the gateway (``x-tenant-id: attacker``), the body
  encoded with a UTF-8 byte-order mark, as UTF-16 or as UTF-32 (vLLM reads all three);
- ``deep``: through the gateway, with one extra field nested 1,010 levels deep (the
  standard library gives up near 1,000, SGLang's orjson reads 1,024);
- ``spoof``: straight to the server, its own ``x-tenant-id: anon-<n>`` and no secret.

The attacker sends its crafted requests first; those the server refuses (4xx; their
answers come back at once) are sent again as plain JSON through the gateway, together
with the honest client's, interleaved; so the attacker keeps its full load and a refusal
costs it nothing but the round trip. (Crafted requests a server accepted would have been
queued ahead of everything, as they were before the fix.) Printed per arm: the attacker's
share of the first half of completions (0.50 is fair; 0.92 before the fix for the
encodings) and how many of its crafted requests were refused.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from trust_real import served  # benchmarks/policies, this script's directory

from schedkit.testing.models import VLLM_CPU, tiny_llama

SECRET_HEADER, SECRET = "x-gateway-secret", "the-gateway-secret-0123456789"
CONFIG = {"policy": ["vtc"], "trust": {"gateway_secret_header": SECRET_HEADER}}
ARMS = ("plain", "bom", "utf16", "utf32", "deep", "spoof")


def attack(arm: str, body: dict[str, object], i: int) -> tuple[bytes, dict[str, str]]:
    """The attacker's request ``i`` as ``arm`` sends it: (data, headers)."""
    gateway = {"Content-Type": "application/json", "x-tenant-id": "attacker"}
    gateway[SECRET_HEADER] = SECRET
    text = json.dumps(body)
    if arm == "bom":
        return text.encode("utf-8-sig"), gateway
    if arm == "utf16":
        return text.encode("utf-16"), gateway
    if arm == "utf32":
        return text.encode("utf-32"), gateway
    if arm == "deep":
        deep = '{"x": ' * 1010 + "1" + "}" * 1010
        return (text[:-1] + ', "deep": ' + deep + "}").encode(), gateway
    if arm == "spoof":
        return text.encode(), {"Content-Type": "application/json", "x-tenant-id": f"anon-{i}"}
    return text.encode(), gateway


def run_arm(model: Path, arm: str, per_client: int, tmp: Path) -> tuple[float, int]:
    with served(model, CONFIG, tmp) as base:
        finished: list[str] = []
        refused = 0
        lock = threading.Lock()

        def post(data: bytes, headers: dict[str, str]) -> int:
            request = urllib.request.Request(f"{base}/v1/completions", data=data, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=600) as response:
                    json.load(response)
                    return int(response.status)
            except urllib.error.HTTPError as error:
                return int(error.code)

        def body(client: str, i: int) -> dict[str, object]:
            tenant = "honest" if client == "honest" else f"anon-{i:06d}"
            return {
                "model": str(model),
                "prompt": [5 + i % 50] * 64,
                "max_tokens": 16,
                "ignore_eos": True,
                "vllm_xargs": {"tenant": tenant},
            }

        def send(client: str, i: int, crafted: bool) -> None:
            nonlocal refused
            data, headers = attack(arm if crafted else "plain", body(client, i), i)
            if client == "honest":
                headers["x-tenant-id"] = "honest"
            status = post(data, headers)
            if crafted and 400 <= status < 500:
                with lock:
                    refused += 1
                    retry.append(i)
                return
            assert status == 200, status
            with lock:
                finished.append(client)

        def run(calls: list[tuple[str, int, bool]], wait_s: float | None) -> list[Any]:
            threads = [threading.Thread(target=send, args=call) for call in calls]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + (wait_s if wait_s is not None else 1e9)
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            return threads

        retry: list[int] = []
        crafted = [] if arm == "plain" else [("attacker", i, True) for i in range(per_client)]
        pending = run(crafted, 30.0)  # refusals come back at once; accepted ones run on
        plain = [i for i in range(per_client) if arm == "plain" or i in retry]
        calls = []
        for i in range(per_client):
            if i in plain:
                calls.append(("attacker", i, False))
            calls.append(("honest", i, False))
        for thread in run(calls, None) + pending:
            thread.join()
        first = finished[: len(finished) // 2]
        return sum(c == "attacker" for c in first) / len(first), refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-client", type=int, default=32)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    args = parser.parse_args()
    os.environ["SCHEDKIT_GATEWAY_SECRET"] = SECRET  # the server's copy of the secret
    os.environ.pop("SCHEDKIT_EDGE_KEY", None)  # schedkit serve makes one per launch
    rows = []
    with tempfile.TemporaryDirectory(prefix="schedkit-attacks-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "model", **VLLM_CPU)
        for arm in args.arms:
            share, refused = run_arm(model, arm, args.per_client, tmp)
            rows.append((arm, share, refused))
            print(f"{arm}: attacker share {share:.3f}, refused {refused}", flush=True)
    print("| attacker's bodies | attacker share of the first half of completions | refused |")
    print("|---|---|---|")
    for arm, share, refused in rows:
        print(f"| {arm} | {share:.3f} | {refused} of {args.per_client} |")


if __name__ == "__main__":
    main()
