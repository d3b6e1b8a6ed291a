"""The two-client fairness attack on ``vtc`` over vLLM's real OpenAI server (trust.md).

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/policies/trust_real.py [--per-client 48]

Builds the tiny random-weight Llama of ``adapters/vllm/tests``, then for each arm launches
``schedkit serve vllm --policy <config with vtc>`` (``--max-num-seqs 2``, so requests
queue) and has two clients submit ``--per-client`` equal requests each, all at once,
interleaved: the honest client's body says ``tenant: honest``, the attacker's claims a
fresh tenant id per request. Printed: the attacker's share of the first half of
completions (in the order the responses came back), per arm:

- ``believed``: ``trust.tenant_from_body = true`` and no header: the body's tenant
  reaches the policy, as on every engine before ``schedkit.trust``;
- ``header``: the default trust config, each client's gateway sending ``x-tenant-id``
  (``honest``, ``attacker``); the body's claims are ignored.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from schedkit.testing.models import VLLM_CPU, tiny_llama

SCHEDKIT = str(Path(sys.executable).parent / "schedkit")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(
    model: Path, config: dict[str, object], tmp: Path, *, stock: bool = False, seqs: int = 2
) -> Iterator[str]:
    """vLLM's OpenAI server on loopback with schedkit ``config``, until the block ends:
    ``schedkit serve vllm`` (with its trust middleware), or with ``stock`` the same
    scheduler through vLLM's API server and ``--scheduler-cls`` alone (no middleware). Yields the base
    URL."""
    port = free_port()
    args = [
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "256",
        "--max-num-seqs",
        str(seqs),
        "--enforce-eager",
        "--skip-tokenizer-init",
    ]
    if stock:
        extra = json.dumps({"schedkit": config})
        server = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
        command = [*server, *args, "--scheduler-cls", "schedkit_vllm.Scheduler"]
        command += ["--additional-config", extra]
    else:
        config_file = tmp / f"arm-{port}.json"
        config_file.write_text(json.dumps(config))
        command = [SCHEDKIT, "serve", "vllm", "--policy", str(config_file), "--", *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("SCHEDKIT_TRUST", None)
    log = (tmp / f"server-{port}.log").open("wb")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                tail = Path(log.name).read_text(errors="replace")[-3000:]
                raise SystemExit(f"server did not start:\n{tail}")
            time.sleep(1)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def run_arm(
    model: Path, config: dict[str, object], per_client: int, headers: bool, tmp: Path
) -> float:
    with served(model, config, tmp) as base:
        finished: list[str] = []
        lock = threading.Lock()

        def send(client: str, i: int) -> None:
            tenant = "honest" if client == "honest" else f"anon-{i:06d}"
            body = {
                "model": str(model),
                "prompt": [5 + i % 50] * 64,
                "max_tokens": 16,
                "ignore_eos": True,
                "vllm_xargs": {"tenant": tenant},
            }
            head = {"Content-Type": "application/json"}
            if headers:
                head["x-tenant-id"] = client
            request = urllib.request.Request(
                f"{base}/v1/completions", data=json.dumps(body).encode(), headers=head
            )
            with urllib.request.urlopen(request, timeout=600) as response:
                json.load(response)
            with lock:
                finished.append(client)

        threads = []
        for i in range(per_client):
            for client in ("attacker", "honest"):
                thread = threading.Thread(target=send, args=(client, i))
                thread.start()
                threads.append(thread)
        for thread in threads:
            thread.join()
        first = finished[: len(finished) // 2]
        return sum(c == "attacker" for c in first) / len(first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-client", type=int, default=48)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="schedkit-trust-") as name:
        tmp = Path(name)
        model = tiny_llama(tmp / "model", **VLLM_CPU)
        believed = run_arm(
            model,
            {"policy": ["vtc"], "trust": {"tenant_from_body": True}},
            args.per_client,
            headers=False,
            tmp=tmp,
        )
        header = run_arm(model, {"policy": ["vtc"]}, args.per_client, headers=True, tmp=tmp)
    print("| arm | attacker share of the first half of completions |")
    print("|---|---|")
    print(f"| believed (before) | {believed:.3f} |")
    print(f"| header tenant (after) | {header:.3f} |")


if __name__ == "__main__":
    main()
