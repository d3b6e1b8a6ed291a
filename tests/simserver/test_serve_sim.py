"""``schedkit serve sim``: the simulator behind vLLM's OpenAI API, on loopback.

Each test runs a real ``SimServer`` (aiohttp on a free port) in its own event loop and
talks to it over HTTP with aiohttp's client, as ``bench --engine openai`` does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import ClientSession, web

from schedkit import Admission, BatchBudget, Policy, RequestView, hookimpl
from schedkit.config import SchedkitConfig
from schedkit.edge.remote import Load, parse_metrics
from schedkit.facade import PolicyFacade
from schedkit.sim.engine import SimEngine
from schedkit.simserver import SimServer, clock
from schedkit.simserver.settings import build_engine, parse_args
from schedkit.testing.servers import prometheus_sample
from schedkit.workload import TraceRequest

ARGS = ["--model", "Llama-3-8B", "--gpu", "H100-SXM"]
STREAM = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


class RejectLength(Policy):
    """Rejects prompts of exactly 17 tokens, naming the tenant and priority it saw."""

    @hookimpl
    def admit_request(self, request: RequestView) -> Admission | None:
        if request.num_prompt_tokens != 17:
            return None
        return Admission.reject(f"17 tokens from {request.tenant} at {request.priority}")


class SlowBudget(Policy):
    """Takes 30 ms to plan each step's batch: a policy too slow for real time."""

    @hookimpl
    def plan_batch(self, default: BatchBudget) -> BatchBudget | None:
        time.sleep(0.03)
        return None


@asynccontextmanager
async def serving(
    args: list[str] = ARGS, policy: Policy | None = None, config: SchedkitConfig | None = None
) -> AsyncIterator[tuple[SimServer, str]]:
    facade = PolicyFacade([("test", policy)]) if policy else None
    server = SimServer(config or SchedkitConfig(), parse_args(args), facade)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    await server.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await server.stop()
        await runner.cleanup()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


async def stream(
    session: ClientSession, url: str, body: dict[str, Any], path: str = "/v1/completions"
) -> list[tuple[float, dict[str, Any] | str]]:
    """The events of one streamed request, each with the monotonic time it came."""
    events: list[tuple[float, dict[str, Any] | str]] = []
    async with session.post(url + path, json={**STREAM, **body}) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"data: "):
                data = line[6:].decode()
                events.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
    return events


def test_one_request_runs_as_the_simulator_runs_it() -> None:
    """Its record is the offline simulator's for the same request, and no token reaches
    the client before the step that made it has ended in wall-clock time."""
    ids = list(range(1000, 1300))

    async def test() -> None:
        async with serving() as (server, url), ClientSession() as session:
            events = await stream(session, url, {"prompt": ids, "max_tokens": 20})
            record = next(iter(server.clock.engine.result.records))
            started = server.clock.started
        built = build_engine(parse_args(ARGS))
        trace = TraceRequest("r", 0.0, 300, 20)
        offline = SimEngine([trace], built.cost, built.config, PolicyFacade([])).run().records[0]
        assert record.first_token_s is not None and offline.first_token_s is not None
        assert record.first_token_s - record.arrival_s == pytest.approx(offline.first_token_s)
        assert record.finish_s is not None and offline.finish_s is not None
        assert record.finish_s - record.arrival_s == pytest.approx(offline.finish_s)
        chunks = [(t, e) for t, e in events if isinstance(e, dict) and e["choices"]]
        assert [e["usage"]["completion_tokens"] for _, e in chunks] == list(range(1, 21))
        assert chunks[-1][1]["choices"][0]["finish_reason"] == "length"
        assert events[-1][1] == "[DONE]" and events[-2][1]["choices"] == []  # type: ignore[index]
        first_due = started + record.first_token_s
        assert chunks[0][0] >= first_due - 1e-3  # not before the modelled GPU made it
        assert chunks[-1][0] >= started + record.finish_s - 1e-3

    run(test)


def test_shared_prefixes_hit_the_prefix_cache() -> None:
    """A prompt starting as an earlier one did reads those blocks from the cache (usage's
    ``cached_tokens``); another prompt reads none."""
    shared = list(range(5000, 5256))  # 16 blocks of 16 tokens

    async def test() -> None:
        async with serving() as (_, url), ClientSession() as session:
            body = {"max_tokens": 2}
            await stream(session, url, {**body, "prompt": [*shared, 1, 2, 3]})
            again = await stream(session, url, {**body, "prompt": [*shared, 7, 8, 9]})
            other = await stream(session, url, {**body, "prompt": list(range(9000, 9259))})
        usages = [e[-2][1] for e in (again, other)]
        cached = [u["usage"]["prompt_tokens_details"]["cached_tokens"] for u in usages]  # type: ignore[index]
        assert cached == [256, 0]

    run(test)


def test_rejection_is_the_vllm_adapters() -> None:
    """A request the policy rejects ends with ``finish_reason`` ``abort`` and
    ``stop_reason`` ``rejected: <why>``, streamed or not, with the tenant from the
    header and the priority from the body; it is counted on ``/metrics``."""

    async def test() -> None:
        trusting = SchedkitConfig.model_validate({"trust": {"priority_from_body": True}})
        async with (
            serving(policy=RejectLength(), config=trusting) as (_, url),
            ClientSession() as session,
        ):
            body = {"prompt": list(range(17)), "max_tokens": 4, "priority": 3}
            headers = {"x-tenant-id": "acme"}
            async with session.post(f"{url}/v1/completions", json=body, headers=headers) as resp:
                whole = await resp.json()
            events = await stream(session, url, body)
            ok = await stream(session, url, {**body, "prompt": list(range(18))})
            page = await (await session.get(f"{url}/metrics")).text()
        choice = whole["choices"][0]
        assert (choice["finish_reason"], choice["stop_reason"]) == (
            "abort",
            "rejected: 17 tokens from acme at 3",
        )
        last = [e for _, e in events if isinstance(e, dict) and e["choices"]][-1]
        assert last["choices"][0]["finish_reason"] == "abort"
        assert last["choices"][0]["stop_reason"].startswith("rejected: 17 tokens from default")
        assert ok[-3][1]["choices"][0]["finish_reason"] == "length"  # type: ignore[index]
        assert prometheus_sample(page, "schedkit_rejections_total", policy="test") == 2

    run(test)


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/completions", {"prompt": list(range(8000)), "max_tokens": 500}, 400,
         "maximum context length is 8192 tokens"),
        ("/v1/completions", {"prompt": [1, 2], "model": "gpt-9"}, 404, "gpt-9"),
        ("/v1/completions", {"prompt": [1, 2], "n": 2}, 400, "n: only 1"),
        ("/v1/completions", {"prompt": [[1], [2]]}, 400, "batch"),
        ("/v1/completions", {"prompt": [-1]}, 400, "token ids"),
        ("/v1/completions", {"prompt": [1], "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": [1], "priority": "high"}, 400, "priority"),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("/v1/completions", [1, 2], 400, "JSON object"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_as_vllm_refuses_them(
    path: str, body: Any, status: int, words: str
) -> None:
    """Streamed or not, a bad body gets vLLM's status and an error naming what is wrong,
    and nothing reaches the engine."""

    async def test() -> None:
        async with serving() as (server, url), ClientSession() as session:
            for streamed in (False, True):
                sent = {**body, "stream": streamed} if isinstance(body, dict) else body
                async with session.post(url + path, json=sent) as resp:
                    assert resp.status == status
                    error = (await resp.json())["error"]
                assert words in error["message"] and error["code"] == status
            assert server.clock.engine.result.records == []

    run(test)


def test_chat_streams_deltas() -> None:
    async def test() -> None:
        async with serving() as (_, url), ClientSession() as session:
            messages = [{"role": "user", "content": "hello there"}]
            body = {"messages": messages, "max_completion_tokens": 3}
            events = await stream(session, url, body, "/v1/chat/completions")
        deltas = [
            e["choices"][0]["delta"] for _, e in events if isinstance(e, dict) and e["choices"]
        ]
        assert deltas[0]["role"] == "assistant" and len(deltas) == 3
        assert all(d["content"] == " tok" for d in deltas)

    run(test)


def test_metrics_are_what_a_router_reads() -> None:
    """While requests run, ``/metrics`` has vLLM's gauges, which the proxy's ``Load``
    reads: running requests, KV blocks in use, the cache's size."""

    async def test() -> None:
        async with serving() as (server, url), ClientSession() as session:
            body = {"prompt": list(range(2000)), "max_tokens": 200}
            tasks = [asyncio.create_task(stream(session, url, body)) for _ in range(8)]
            while server.clock.engine.step_index < 5:
                await asyncio.sleep(0.005)
            page = await (await session.get(f"{url}/metrics")).text()
            await asyncio.gather(*tasks)
        load = Load(0.0)
        load.gauges = parse_metrics(page)
        assert load.num_running + load.num_waiting == 8
        assert load.kv_blocks_total == server.clock.cfg.num_blocks
        assert load.kv_blocks_total - load.kv_blocks_free > 0

    run(test)


def test_a_policy_too_slow_for_real_time_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Steps that start late are counted on ``/metrics`` and warned of once."""

    async def test() -> None:
        async with (
            serving([*ARGS, "--max-lag-ms", "5"], SlowBudget()) as (server, url),
            ClientSession() as session,
        ):
            bodies = [{"prompt": list(range(i, i + 50)), "max_tokens": 10} for i in range(4)]
            await asyncio.gather(*(stream(session, url, b) for b in bodies))
            page = await (await session.get(f"{url}/metrics")).text()
        assert prometheus_sample(page, "schedkit_sim_late_steps_total") >= 5
        assert server.clock.late_steps >= 5

    with caplog.at_level(logging.WARNING, logger="schedkit.simserver"):
        run(test)
    warnings = [r for r in caplog.records if "cannot keep up" in r.getMessage()]
    assert len(warnings) == 1


def test_a_long_running_server_keeps_only_what_is_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clock, "KEEP_FINISHED", 4)

    async def test() -> None:
        async with serving() as (server, url), ClientSession() as session:
            for i in range(12):
                await stream(session, url, {"prompt": [i, i + 1], "max_tokens": 2})
            engine = server.clock.engine
            assert len(engine.pending) <= 4 and len(engine.result.records) <= 4
            assert server.clock.finished["length"] == 12

    run(test)
