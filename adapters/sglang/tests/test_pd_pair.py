"""A real SGLang prefill/decode pair behind schedkit's proxy (issue #42 part 5).

Three ``schedkit serve sglang`` servers on loopback (tiny random-weight Llama with a word
tokenizer, CPU): a prefill server (``--disaggregation-mode prefill``) and a decode server
(``--disaggregation-mode decode``) joined by SGLang's Mooncake transfer engine over TCP
(``mooncake_tcp``; the non-CUDA Mooncake package and the Debian libraries it links come
from ``scripts/make-venv.sh``), and a plain server as the single-engine reference. In
front of the pair, ``python -m schedkit.edge.pd --protocol sglang`` routes with
``test-route-by-length`` (``schedkit.testing.contract``) and lists the decode server
twice (as 127.0.0.1 and as localhost) so that its decode pool has two instances to
choose from. Requests of several lengths go through the proxy, streamed and not, one at
a time, then again (other prompts) all at once, with a 17-token prompt that the servers'
``test-echo-metadata`` rejects. Checked:

- each answer of the first round equals the reference's (greedy); the burst's all end
  with their ``max_tokens``; the rejected one is SGLang's streamed error naming the
  reason;
- the KV moved: the prefill server counts one Mooncake transfer per request
  (``sglang:kv_transfer_total_mb_count``);
- each side computed what it should, by the steps its schedkit scheduler recorded
  (``--record-steps``): prefill every prompt (its radix cache hits nothing here) and no
  decode token; decode no prompt token (all of it loaded) and ``max_tokens - 1`` tokens
  a request (the first comes from prefill); every step's duration a step's, not the
  server's uptime (SGLang's disaggregated loops form batches in
  ``get_next_disagg_*_batch_to_run``, which the adapter now patches too);
- schedkit's policy ran in both servers' schedulers (``admit_request`` per request on
  each; ``order_waiting`` on decode, which orders its pre-allocation queue: SGLang
  alone sorts that queue only with ``--enable-priority-scheduling``, not given here);
- the proxy applied the policy's choice: its per-instance counts are the lengths'
  residues, every one ``chosen_by="policy"``.

Numbers from this project's 2-core machine: the three servers start together in ~60 s
and take ~2.1 GB RSS each; the test fails (it does not skip) where the memory is not
there, or Mooncake's libraries are missing, saying so.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from engine_util import tiny_model
from schedkit.testing.servers import (
    available_gib,
    prometheus_sample,
    start_logged,
    wait_healthy,
)
from test_server import SCHEDKIT, _env, _free_port, _kill

_sample = prometheus_sample  # short, for the many checks below
SERVER_POLICY = "priority+test-echo-metadata"  # rejects 17-token prompts (tests/site)
ROUTER = "test-route-by-length"  # instance = prompt length % pool size
LENGTHS = (40, 65, 90, 111, 150, 201)  # odd and even
REJECTED = 17
MAX_TOKENS = 8
EXPECTED = "three SGLang servers start in ~60 s on an idle 2-core machine"
STARTUP_S = 400  # ~60 s for the three together on an idle 2-core machine
NEEDS_GIB = 8  # ~2.1 GB RSS a server, and headroom
SYSROOT = Path(sys.prefix) / "sysroot"  # Mooncake's Debian libraries (make-venv.sh)


@dataclass
class Pair:
    prefill: str
    decode: str
    reference: str
    proxy: str
    logs: Path


def _pair_env() -> dict[str, str]:
    """The servers' environment: Mooncake's libraries on the loader's path."""
    libs = [str(SYSROOT / d / "x86_64-linux-gnu") for d in ("usr/lib", "lib")]
    if not all(Path(d).is_dir() for d in libs):
        pytest.fail(
            f"Mooncake's libraries are not under {SYSROOT}: rebuild the environment"
            " (rm -rf .venv-sglang; make test-sglang): the pair was NOT tested"
        )
    env = _env()
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, env.get("LD_LIBRARY_PATH", "")])
    env["OMP_NUM_THREADS"] = "1"  # three servers on a 2-core machine
    return env


def _server(model: Path, port: int, steps: Path, extra: list[str]) -> list[str]:
    args = [
        "--model-path", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--device", "cpu", "--attention-backend", "torch_native",
        "--sampling-backend", "pytorch", "--disable-cuda-graph", "--disable-overlap-schedule",
        "--max-total-tokens", "4096", "--enable-metrics", "--nccl-port", str(_free_port()),
        *extra,
    ]  # fmt: skip
    record = ["--record-steps", str(steps)]
    return [SCHEDKIT, "serve", "sglang", "--policy", SERVER_POLICY, *record, "--", *args]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    if available_gib() < NEEDS_GIB:
        pytest.fail(
            f"a prefill/decode pair and a reference server need ~{NEEDS_GIB} GiB of free"
            f" memory; this machine has {available_gib():.1f} GiB available: the pair"
            " was NOT tested"
        )
    env = _pair_env()
    model = tiny_model(tmp_path_factory.mktemp("tiny-words"), word_tokenizer=True)
    logs = tmp_path_factory.mktemp("pd-logs")
    ports = {name: _free_port() for name in ("prefill", "decode", "reference", "proxy")}
    bootstrap = _free_port()
    base = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    roles = {
        "prefill": ["--disaggregation-mode", "prefill",
                    "--disaggregation-transfer-backend", "mooncake_tcp",
                    "--disaggregation-bootstrap-port", str(bootstrap)],
        "decode": ["--disaggregation-mode", "decode",
                   "--disaggregation-transfer-backend", "mooncake_tcp",
                   # on CPU: SGLang's default backup of retracted requests needs CUDA
                   "--disaggregation-decode-retraction-backup", "cpu_tensor"],
        "reference": [],
    }  # fmt: skip
    started: dict[str, tuple[subprocess.Popen[bytes], str, Path]] = {}
    try:
        for name, extra in roles.items():
            log = logs / f"{name}.log"
            command = _server(model, ports[name], logs / f"{name}-steps.csv", extra)
            started[name] = (start_logged(command, log, env), base[name], log)
        wait_healthy(started, STARTUP_S, EXPECTED)
        proxy = [
            sys.executable, "-m", "schedkit.edge.pd", "--policy", ROUTER,
            "--protocol", "sglang", "--prefill", base["prefill"],
            "--bootstrap-port", str(bootstrap),
            "--decode", base["decode"], f"http://localhost:{ports['decode']}",
            "--port", str(ports["proxy"]), "--metrics-interval-s", "0.5",
        ]  # fmt: skip
        log = logs / "proxy.log"
        started["proxy"] = (start_logged(proxy, log, env), base["proxy"], log)
        wait_healthy({"proxy": started["proxy"]}, STARTUP_S, EXPECTED)
        yield Pair(base["prefill"], base["decode"], base["reference"], base["proxy"], logs)
    finally:
        for process, _, _ in started.values():
            _kill(process)


def _prompt(n: int, salt: int) -> list[int]:
    return [(7 * i + n + salt) % 500 + 3 for i in range(n)]


def _complete(base: str, n: int, stream: bool, salt: int = 0) -> dict[str, Any]:
    """The answer to a prompt of ``n`` tokens: its text and its first choice's end, or
    the HTTP error's status and body."""
    body = {
        "model": "m", "prompt": _prompt(n, salt), "max_tokens": MAX_TOKENS, "temperature": 0.0,
        "ignore_eos": True, "stream": stream,
    }  # fmt: skip
    request = urllib.request.Request(
        f"{base}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read().decode()
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode()}
    if not stream:
        choice = json.loads(raw)["choices"][0]
        return {"text": choice["text"], "finish": choice["finish_reason"]}
    text, finish = "", None
    for line in raw.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            if "error" in chunk:  # SGLang streams a rejection as an error chunk
                return {"error": chunk["error"]["message"]}
            for choice in chunk.get("choices", []):
                text += choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
    return {"text": text, "finish": finish}


def _metrics(base: str) -> str:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        return str(response.read().decode())


def _steps(path: Path) -> list[dict[str, str]]:
    """The rows of a ``--record-steps`` file (its first line is a comment)."""
    return list(csv.DictReader(path.read_text().splitlines()[1:]))


def _counts(pair: Pair) -> dict[str, float]:
    """What the servers have counted so far (SGLang's start-up warm-up request
    included): the differences are the test's."""
    prefill, decode = _metrics(pair.prefill), _metrics(pair.decode)
    admit = {"hook": "admit_request", "policy": SERVER_POLICY}
    return {
        "transfers": _sample(prefill, "sglang:kv_transfer_total_mb_count"),
        "prefill admits": _sample(prefill, "schedkit_hook_latency_seconds_count", **admit),
        "decode admits": _sample(decode, "schedkit_hook_latency_seconds_count", **admit),
        "decode orders": _sample(
            decode, "schedkit_hook_latency_seconds_count", hook="order_waiting"
        ),
        "prefill rejections": _sample(prefill, "schedkit_rejections_total"),
        "decode rejections": _sample(decode, "schedkit_rejections_total"),
        "prefill rows": len(_steps(pair.logs / "prefill-steps.csv")),
        "decode rows": len(_steps(pair.logs / "decode-steps.csv")),
    }


def test_pair_behind_the_proxy_answers_as_one_engine_with_policies_on_both_sides(
    pair: Pair,
) -> None:
    before = _counts(pair)
    # One at a time, each request runs alone on both: the pair's answers must be the
    # single engine's token for token.
    for i, n in enumerate(LENGTHS):
        got = _complete(pair.proxy, n, stream=i % 2 == 0)
        want = _complete(pair.reference, n, stream=False)
        assert got.get("finish") == "length" and want.get("finish") == "length", (n, got, want)
        assert got["text"] == want["text"], (n, got, want)
    # Then all at once (other prompts of the same lengths), and a 17-token prompt that
    # the servers' admission policy rejects: as SGLang streams it, an error chunk naming
    # the reason (whichever server's answer came first).
    with ThreadPoolExecutor(len(LENGTHS) + 1) as pool:
        rejected = pool.submit(_complete, pair.proxy, REJECTED, True)
        burst = list(pool.map(lambda n: _complete(pair.proxy, n, True, 1), LENGTHS))
    for n, got in zip(LENGTHS, burst, strict=True):
        assert got.get("finish") == "length", (n, got)
    assert rejected.result()["error"].startswith("rejected: tenant=default"), rejected.result()
    _check_both_sides(pair, before, [*LENGTHS, *LENGTHS])


def _check_both_sides(pair: Pair, before: dict[str, float], lengths: list[int]) -> None:
    """What each server did with the prompts of ``lengths`` (and the rejected one), and
    where the proxy sent them."""
    after = _counts(pair)
    done = {k: after[k] - before[k] for k in after}
    assert done["transfers"] == len(lengths), done

    # what each side computed, from the steps its schedkit scheduler recorded (rows of
    # the warm-up excluded)
    rows = {
        name: _steps(pair.logs / f"{name}-steps.csv")[int(before[f"{name} rows"]) :]
        for name in ("prefill", "decode")
    }
    computed = {
        name: (
            sum(int(r["prefill_tokens"]) for r in got),
            sum(int(r["decode_tokens"]) for r in got),
        )
        for name, got in rows.items()
    }
    assert computed["prefill"] == (sum(lengths), 0), computed
    assert computed["decode"] == (0, len(lengths) * (MAX_TOKENS - 1)), computed
    durations = [float(r["seconds"]) for got in rows.values() for r in got]
    assert 0 < max(durations) < 30, max(durations)  # a step's time, not the uptime
    # a prefill server's request whose prefill ended waits for its transfer: not running
    # (no prompt here is prefilled in chunks)
    assert {r["num_running"] for r in rows["prefill"]} == {"0"}, rows["prefill"]

    # the policy in both schedulers: admission of every request on each side (the
    # rejected one reaches decode unless the proxy has closed its leg first), the
    # pre-allocation order on decode
    assert done["prefill admits"] == len(lengths) + 1, done
    assert done["decode admits"] in (len(lengths), len(lengths) + 1), done
    assert done["prefill rejections"] + done["decode rejections"] >= 1, done
    # once a request of the first round at least, and once the burst at least
    assert done["decode orders"] >= len(LENGTHS) + 1, done

    proxy = _metrics(pair.proxy)
    odd = sum(n % 2 for n in lengths)
    even = len(lengths) - odd
    routed = "schedkit_pd_routed_total"
    # SGLang's protocol picks the decode instance at arrival: the rejected (17) too
    assert _sample(proxy, routed, role="decode", index="1", chosen_by="policy") == odd + 1
    assert _sample(proxy, routed, role="decode", index="0", chosen_by="policy") == even
    assert _sample(proxy, routed, role="prefill", chosen_by="policy") == len(lengths) + 1
    assert _sample(proxy, routed, chosen_by="round-robin") == 0
    outcomes = "schedkit_pd_requests_total"
    assert _sample(proxy, outcomes, outcome="decoded") == len(lengths)
    refused = [_sample(proxy, outcomes, outcome=f"rejected at {s}") for s in ("prefill", "decode")]
    assert sum(refused) == 1, proxy
