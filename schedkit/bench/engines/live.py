"""``--engine openai``: replay a workload against running servers over their OpenAI API.

``schedkit bench --engine openai --target URL [--target URL2 ...]`` runs one arm per
target (arm ``i`` against ``--target`` ``i``; one target takes one arm). The policies
run in the servers (``schedkit serve vllm|sglang --policy X``); an arm's ``--policy``
names it in the report. Each request is a streaming ``POST /v1/completions`` with the
prompt as token ids (built as for every engine, so shared prefixes stay shared), sent
when the wall clock reaches its arrival time (open loop), or when one of
``--max-concurrency`` slots frees.

- **Metadata.** The tenant goes in the operator's tenant header (``trust.tenant_header``,
  ``x-tenant-id`` by default), as a gateway would set it. Priority and SLO targets go in
  the body the way the server's adapter reads them: ``vllm_xargs`` and ``priority`` for
  vLLM and ``schedkit serve sim``, ``custom_params`` and ``priority`` for SGLang, told apart by ``GET /v1/models``
  (``owned_by``); another server gets the header only. The server's trust settings
  decide what it believes (``docs/trust.md``).
- **Prefix hits** are the server's: ``usage.prompt_tokens_details.cached_tokens`` where
  it sends it (vLLM with ``--enable-prompt-tokens-details``, ``schedkit serve sim``);
  the arm's ``prefix_hit_rate`` is over the requests that reported one (0 when none did).
- **Timing** is the client's: TTFT is from the request's arrival time to its first
  streamed token, inter-token gaps between streamed chunks (usage counts tokens when
  the server sends ``continuous_usage_stats``, else one per chunk), E2E to the last.
  Each arm's target, what it serves, and how late its requests were sent
  (``send_lag_ms``) are in ``engine.targets``.
- **Failures** are counted per request, never retried: a 503 or abort whose message is
  ``rejected: why`` is a rejection (the server's admission policy); anything else
  (connection refused, a non-2xx status, a body that is not an OpenAI stream, a stream
  cut before it finished, ``--request-timeout-s`` passed, ``--max-seconds`` reached
  before it was sent) ends the request as ``error`` with its reason, summed in
  ``metrics.errors``. Every request has a timeout and the run a deadline, so a run
  always ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from schedkit.bench.engines.real_arm import RealArm
from schedkit.bench.engines.requests import ModelInfo, model_info, request_metadata
from schedkit.bench.progress import LiveProgress, live_replay
from schedkit.edge.remote import connector
from schedkit.records import RequestRecord, RunResult

if TYPE_CHECKING:
    from schedkit.bench.spec import PreparedBench

__all__ = ["DEFAULT_VOCAB", "LiveArm", "Target", "probe", "run_live_arm"]

log = logging.getLogger("schedkit.openai")

DEFAULT_VOCAB = 32000  # token ids stay below it when --model names no local directory
DEFAULT_POSITIONS = 1 << 20  # no clipping unless the server or --model says otherwise
ERROR = "error"
SNIPPET = 200  # characters of an error body kept in a reason
VLLM_FIELDS = ("vllm", "schedkit-sim")  # servers reading vLLM's request fields


def run_live_arm(bench: PreparedBench, index: int, rate_scale: float) -> RunResult:
    """``--engine openai``: arm ``index`` against its target (with ``--serve-command``, a
    server started for this arm: ``schedkit.bench.engines.launch``)."""
    spec = bench.spec
    url = spec.live.targets[index] if len(spec.live.targets) > 1 else spec.live.targets[0]
    if spec.live.serve_command is None:
        return _replay_arm(bench, index, rate_scale, url)
    from schedkit.bench.engines.launch import arm_command, launched, log_name

    label = bench.labels[index]
    policy = "+".join(bench.configs[index].policy)  # an --arm's own name is only its label
    command = arm_command(spec.live.serve_command, policy)
    log = (bench.out_dir or Path(".")) / log_name(index, label)
    with launched(command, url, spec.live.server_start_timeout_s, log):
        result = _replay_arm(bench, index, rate_scale, url)
    bench.engine_info["targets"][label]["launched"] = {"command": command, "log": log.name}
    return result


def _replay_arm(bench: PreparedBench, index: int, rate_scale: float, url: str) -> RunResult:
    target = asyncio.run(probe(url, bench.spec.live.request_timeout_s))
    arm = LiveArm(bench, index, rate_scale, _info(bench.spec.settings.model, target), target)
    return arm.run()


@dataclass(frozen=True, slots=True)
class Target:
    """A server as ``GET /v1/models`` describes it; ``problem`` when it could not."""

    url: str
    model: str = ""
    kind: str = "openai"  # "vllm", "sglang" or another OpenAI-compatible server
    max_model_len: int | None = None
    problem: str = ""


async def probe(url: str, timeout_s: float) -> Target:
    """What ``url`` serves; never raises: an unreachable or non-OpenAI target comes back
    with its ``problem``, and every request of the arm then fails with it."""
    import aiohttp

    base = url.rstrip("/")
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(f"{base}/v1/models") as resp,
        ):
            text = await resp.text()
            if resp.status != 200:
                return Target(base, problem=f"GET /v1/models: HTTP {resp.status}")
            data = json.loads(text)["data"][0]
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return Target(base, problem=f"unreachable: {_describe(exc)}")
    except (ValueError, KeyError, IndexError, TypeError):
        return Target(base, problem="GET /v1/models is not an OpenAI model list")
    owner = str(data.get("owned_by", "")).lower()
    kind = owner if owner in ("vllm", "sglang", "schedkit-sim") else "openai"
    length = data.get("max_model_len")
    return Target(base, str(data.get("id", "")), kind, length if isinstance(length, int) else None)


def _info(model: str, target: Target) -> ModelInfo:
    """The token space of the prompts: the local model directory ``--model`` names, else
    ids below ``DEFAULT_VOCAB`` and the server's context length."""
    if (Path(model).expanduser() / "config.json").is_file():
        return model_info(model, "openai")
    return ModelInfo(Path(model), DEFAULT_VOCAB, target.max_model_len or DEFAULT_POSITIONS)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:SNIPPET]


class LiveArm(RealArm):
    """One arm's replay against ``target``."""

    engine_name = "openai"

    def __init__(
        self, bench: PreparedBench, index: int, rate_scale: float, info: ModelInfo, target: Target
    ) -> None:
        super().__init__(bench, index, rate_scale, info)
        self.target = target
        spec = bench.spec
        self.timeout_s = spec.live.request_timeout_s
        self.deadline_s = spec.live.max_seconds
        self.concurrency = spec.workload.max_concurrency
        self.header = bench.configs[index].trust.tenant_header
        self.errors: Counter[str] = Counter()
        self.lags: list[float] = []
        self.cache_reported: set[str] = set()  # requests whose usage gave cached_tokens
        self.progress: LiveProgress | None = None  # while run() replays, if shown
        # per arm, in results.json's engine.targets (engine.real is the last arm's)
        self.arm_info: dict[str, Any] = {
            "url": target.url, "server": target.kind, "model": target.model,
        }  # fmt: skip
        if target.problem:
            self.arm_info["problem"] = target.problem
        bench.engine_info.setdefault("targets", {})[bench.labels[index]] = self.arm_info

    def close(self) -> None:
        """Nothing to free: the server outlives the arm."""

    def run(self) -> RunResult:
        self.started = time.perf_counter()
        self.progress = live_replay(len(self.records))
        try:
            asyncio.run(self._replay())
        finally:
            if self.progress is not None:
                self.progress.close()
        errors = dict(self.errors)
        self.result.errors = errors
        if self.lags:
            p50, p99, top = np.quantile(np.array(self.lags) * 1e3, [0.5, 0.99, 1.0])
            self.arm_info["send_lag_ms"] = {
                "p50": round(float(p50), 3), "p99": round(float(p99), 3), "max": round(float(top), 3),
            }  # fmt: skip
        if errors:
            failed = sum(errors.values())
            log.warning(
                "--engine openai, %s: %d of %d requests failed (%s)",
                self.target.url,
                failed,
                len(self.records),
                "; ".join(f"{n} {why}" for why, n in self.errors.most_common(5)),
            )
        run = self.finish_run(self.clock(), 0)
        reported = [r for r in self.records if r.request_id in self.cache_reported]
        if reported:  # the prefix hit rate, where the server says what its cache served
            run.prefix_query_tokens = sum(r.prompt_tokens for r in reported)
            run.prefix_hit_tokens = sum(r.cached_tokens for r in reported)
        return run

    async def _replay(self) -> None:
        import aiohttp

        limit = asyncio.Semaphore(self.concurrency) if self.concurrency else None
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(connector=connector(), timeout=timeout) as session:
            tasks: list[asyncio.Task[None]] = []
            for i, trace in enumerate(self.traces):
                delay = trace.arrival_s - self.clock()
                if self.deadline_s is not None and trace.arrival_s >= self.deadline_s:
                    for rec in self.records[i:]:
                        self.fail(rec, f"not sent: --max-seconds {self.deadline_s:g} reached")
                    if self.progress is not None:
                        self.progress.ended(len(self.records) - i)
                    break
                if delay > 0:
                    await asyncio.sleep(delay)
                if limit is not None:
                    await limit.acquire()
                tasks.append(asyncio.create_task(self._send(session, i, limit)))
            if tasks:
                await asyncio.wait(tasks, timeout=self.timeout_s + 5.0)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for rec in self.records:  # a task cancelled at the deadline
            if rec.finish_reason == "":
                self.fail(rec, f"timed out after {self.timeout_s:g} s")

    async def _send(self, session: Any, index: int, limit: asyncio.Semaphore | None) -> None:
        rec = self.records[index]
        self.lags.append(max(0.0, self.clock() - rec.arrival_s))
        if self.progress is not None:
            self.progress.sent()
        try:
            if self.target.problem:
                self.fail(rec, self.target.problem)
            else:
                await self._stream(session, index)
        finally:
            if limit is not None:
                limit.release()
            if self.progress is not None:
                self.progress.ended()

    def body(self, index: int) -> dict[str, Any]:
        """The request body for request ``index``, with its metadata where the server's
        adapter reads it."""
        rec, trace = self.records[index], self.traces[index]
        body: dict[str, Any] = {
            "model": self.target.model or self.bench.spec.settings.model,
            "prompt": self.prompts[index],
            "max_tokens": rec.max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        meta = request_metadata(trace)
        if self.target.kind in VLLM_FIELDS:
            body["vllm_xargs"] = meta
        elif self.target.kind == "sglang":
            body["custom_params"] = meta
        if rec.priority and self.target.kind in (*VLLM_FIELDS, "sglang"):
            body["priority"] = rec.priority
        return body

    async def _stream(self, session: Any, index: int) -> None:
        import aiohttp

        rec = self.records[index]
        url = f"{self.target.url}/v1/completions"
        headers = {self.header: rec.tenant}
        tokens = 0
        try:
            async with session.post(url, json=self.body(index), headers=headers) as resp:
                if resp.status != 200:
                    self._refused(rec, resp.status, await resp.text())
                    return
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    tokens = self._chunk(rec, json.loads(data), tokens)
                    if rec.finish_reason:
                        return
        except TimeoutError:
            self.fail(rec, f"timed out after {self.timeout_s:g} s")
            return
        except aiohttp.ClientResponseError as exc:
            self.fail(rec, f"HTTP {exc.status}")
            return
        except (aiohttp.ClientError, OSError) as exc:
            self.fail(rec, f"connection failed: {_describe(exc)}")
            return
        except (ValueError, KeyError, TypeError, AttributeError):
            self.fail(rec, "not an OpenAI completion stream")
            return
        if not rec.finish_reason:
            self.fail(rec, f"stream ended before the request finished ({tokens} tokens)")

    def _chunk(self, rec: RequestRecord, chunk: dict[str, Any], tokens: int) -> int:
        """One streamed chunk of ``rec``; returns its token count so far."""
        clock = self.clock()
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", "") if isinstance(error, dict) else str(error)
            self._refused(rec, int(error.get("code") or 500) if isinstance(error, dict) else 500,
                          str(message))  # fmt: skip
            return tokens
        choices = chunk.get("choices") or []
        usage = chunk.get("usage") or {}
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            rec.cached_tokens = details["cached_tokens"]  # the server's prefix cache hit
            self.cache_reported.add(rec.request_id)
        if usage.get("completion_tokens") is not None:
            tokens = max(tokens, int(usage["completion_tokens"]))
        elif choices:
            tokens += 1
        self.record_tokens(rec, tokens, clock)
        for choice in choices:
            reason = choice.get("finish_reason")
            if reason is None:
                continue
            message = choice.get("stop_reason")
            if reason == "abort" or (isinstance(message, str) and message.startswith("rejected:")):
                self.end(rec, "abort", message, clock)
                if rec.finish_reason == "aborted":
                    self.fail(rec, f"aborted by the server: {message or 'no reason given'}")
            else:
                self.end(rec, str(reason), message, clock)
        return tokens

    def _refused(self, rec: RequestRecord, status: int, text: str) -> None:
        """The server answered ``status`` with ``text``: a rejection when its message is
        ``rejected: why``, else an error."""
        try:
            message = json.loads(text)
            if isinstance(message, dict):
                inner = message.get("error", message)
                message = inner.get("message", inner) if isinstance(inner, dict) else inner
        except ValueError:
            message = text
        message = str(message).strip()
        if "rejected:" in message:
            why = message.split("rejected:", 1)[1].strip() or "rejected"
            self.reject(rec, why[:SNIPPET])
        else:
            self.fail(rec, f"HTTP {status}: {message[:SNIPPET]}" if message else f"HTTP {status}")

    def fail(self, rec: RequestRecord, reason: str) -> None:
        """``rec`` failed for ``reason``: an error, a miss for every metric, counted."""
        if rec.finish_reason in ("length", "stop", "rejected", ERROR):
            return
        rec.finish_reason, rec.reject_reason = ERROR, reason
        rec.finish_s = None
        self.errors[reason] += 1
