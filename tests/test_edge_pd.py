"""The prefill/decode proxy (``schedkit.edge.pd``) against stub OpenAI servers on loopback:
what each leg sends, where the policy's choice sends it, what the client gets back, the
views the router sees, and one-line errors for bad input. The real vLLM pair is in
``adapters/vllm/tests/test_pd_pair.py``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from schedkit import Policy, ReplicaView, RequestView, hookimpl
from schedkit.edge.pd import PDProxy, _decode_outcome, main, prefill_body
from schedkit.edge.remote import Load, parse_metrics, prompt_tokens, request_view
from schedkit.facade import PolicyFacade
from schedkit.testing.openai_stub import StaleConnections

METRICS_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:cache_config_info{block_size="32",engine="0",num_gpu_blocks="400"} 1.0
vllm:prompt_tokens_total{engine="0",model_name="m"} NaN
"""


class ByLength(Policy):
    """Routes to ``num_prompt_tokens % len(replicas)`` and records what it was shown."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int, int, tuple[str, ...]]] = []

    @hookimpl
    def route_request(self, request: RequestView, replicas: Sequence[ReplicaView]) -> int:
        roles = tuple(r.role for r in replicas)
        self.seen.append((roles[0], request.num_prompt_tokens, request.max_tokens, roles))
        return request.num_prompt_tokens % len(replicas)


@dataclass
class Stub:
    """An OpenAI server that answers from ``answer`` and records what it got."""

    name: str
    got: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    status: int = 200
    reject: bool = False
    hold: bool = False  # stream nothing until the client goes (a decode awaiting KV)
    closed: list[bool] = field(default_factory=list)
    stale_s: float | None = None  # drop requests on connections idle longer
    stale: StaleConnections = field(init=False)

    def __post_init__(self) -> None:
        self.stale = StaleConnections(self.stale_s)

    @property
    def dropped(self) -> int:
        return self.stale.dropped

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.stale.middleware])
        app.router.add_post("/v1/completions", self.complete)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        return app

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.got.append(body)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        if self.hold:
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            try:  # from 1 s on, a comment line now and then, until the client goes (or 5 s)
                await asyncio.sleep(1.0)
                for _ in range(400):
                    await out.write(b": waiting\n\n")
                    await asyncio.sleep(0.01)
            except (asyncio.CancelledError, ConnectionError):
                self.closed.append(True)
                raise
            return out
        if self.status == 503:  # SGLang's answer to an admission policy's "no"
            error = {"object": "error", "message": "rejected: too long", "code": 503}
            return web.json_response(error, status=503)
        if self.status != 200:
            return web.json_response({"error": {"message": "boom"}}, status=self.status)
        choice: dict[str, Any] = {"text": self.name, "finish_reason": "length"}
        if self.reject:
            choice.update(finish_reason="abort", stop_reason="rejected: too long")
        answer = {"choices": [choice], "kv_transfer_params": {"from": self.name}}
        if not body.get("stream"):
            return web.json_response(answer)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for i in range(3):
            await out.write(f"data: {json.dumps({'i': i, 'by': self.name})}\n\n".encode())
        await out.write(b"data: [DONE]\n\n")
        return out

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=METRICS_PAGE)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": self.name, "owned_by": "vllm"}]})


Scenario = Callable[[str, ClientSession, PDProxy], Awaitable[None]]


def run(
    scenario: Scenario,
    prefill: list[Stub],
    decode: list[Stub],
    policy: Policy | None = None,
    dead_decode: bool = False,
    interval: float = 0.0,
    **options: Any,
) -> PDProxy:
    """Start the stubs and a proxy in front of them, then run ``scenario(url, client,
    proxy)``."""

    async def go() -> PDProxy:
        servers = [TestServer(s.app()) for s in (*prefill, *decode)]
        for server in servers:
            await server.start_server()
        urls = [str(s.make_url("")).rstrip("/") for s in servers]
        decode_urls = urls[len(prefill) :]
        if dead_decode:
            decode_urls = ["http://127.0.0.1:9"]  # discard port: nothing listens
        facade = PolicyFacade([("by-length", policy)] if policy else [])
        proxy = PDProxy(
            facade, urls[: len(prefill)], decode_urls, metrics_interval_s=interval, **options
        )
        front = TestServer(proxy.app())
        await front.start_server()
        try:
            async with ClientSession() as client:
                await scenario(str(front.make_url("")).rstrip("/"), client, proxy)
        finally:
            await front.close()
            for server in servers:
                await server.close()
        return proxy

    return asyncio.run(go())


def test_each_request_is_prefilled_then_decoded_where_the_policy_says() -> None:
    prefill, decode = [Stub("p0"), Stub("p1")], [Stub("d0"), Stub("d1")]
    policy = ByLength()
    texts: list[str] = []

    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        for n in (4, 5, 7):
            body = {"model": "m", "prompt": list(range(n)), "max_tokens": 9, "stream": True,
                    "stream_options": {"include_usage": True}, "min_tokens": 2}  # fmt: skip
            async with client.post(f"{url}/v1/completions", json=body,
                                   headers={"x-tenant-id": "acme"}) as resp:  # fmt: skip
                assert resp.status == 200
                texts.append(await resp.text())
        async with client.get(f"{url}/metrics") as resp:
            page = await resp.text()
        assert 'role="decode",index="1"' in page and 'chosen_by="policy"} 2' in page

    run(scenario, prefill, decode, policy)
    # prefill legs: one token, not streamed, a remote decode asked for
    assert [len(b["prompt"]) for b in prefill[0].got] == [4]
    assert [len(b["prompt"]) for b in prefill[1].got] == [5, 7]
    for leg in prefill[0].got + prefill[1].got:
        assert leg["max_tokens"] == 1 and leg["stream"] is False
        assert "stream_options" not in leg and "min_tokens" not in leg
        assert leg["kv_transfer_params"]["do_remote_decode"] is True
    # decode legs: the original request, with the prefill's kv_transfer_params
    assert [b["kv_transfer_params"] for b in decode[1].got] == [{"from": "p1"}] * 2
    assert decode[0].got[0]["max_tokens"] == 9 and decode[0].got[0]["min_tokens"] == 2
    assert decode[0].got[0]["stream_options"] == {"include_usage": True}
    # both legs carry the client's tenant header and one request id
    assert prefill[0].headers[0]["x-tenant-id"] == "acme"
    assert prefill[0].headers[0]["x-request-id"] == decode[0].headers[0]["x-request-id"]
    assert texts[0].count("data:") == 4 and '"by": "d0"' in texts[0]
    # the router saw each pool with its role, and the prefill leg's one token
    assert policy.seen[:2] == [
        ("prefill", 4, 1, ("prefill", "prefill")),
        ("decode", 4, 9, ("decode", "decode")),
    ]


def test_without_a_router_each_pool_takes_turns() -> None:
    prefill, decode = [Stub("p0"), Stub("p1")], [Stub("d0")]

    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        for _ in range(3):
            body = {"prompt": "a b c", "max_tokens": 2}
            async with client.post(f"{url}/v1/completions", json=body) as resp:
                assert (await resp.json())["choices"][0]["text"] == "d0"

    proxy = run(scenario, prefill, decode)
    assert (len(prefill[0].got), len(prefill[1].got), len(decode[0].got)) == (2, 1, 3)
    assert proxy.routed["prefill", 0, "round-robin"] == 2


def test_no_leg_is_sent_on_a_connection_the_server_may_be_closing() -> None:
    # servers close idle connections (uvicorn: after 5 s), and a request written to one as
    # it closes is lost; these stubs drop any request on a connection idle over 2.5 s
    prefill, decode = [Stub("p0", stale_s=2.5)], [Stub("d0", stale_s=2.5)]

    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        for pause in (0.0, 0.0, 3.0, 0.0):
            await asyncio.sleep(pause)
            body = {"prompt": "a b c", "max_tokens": 2}
            async with client.post(f"{url}/v1/completions", json=body) as resp:
                assert resp.status == 200 and (await resp.json())["choices"][0]["text"] == "d0"

    run(scenario, prefill, decode)
    assert prefill[0].dropped == decode[0].dropped == 0
    assert len(prefill[0].got) == len(decode[0].got) == 4


def test_a_rejected_or_failed_prefill_ends_the_request_there() -> None:
    prefill, decode = [Stub("p0", reject=True)], [Stub("d0")]

    async def rejected(url: str, client: ClientSession, proxy: PDProxy) -> None:
        body = {"prompt": [1, 2, 3], "max_tokens": 4, "stream": True}
        async with client.post(f"{url}/v1/completions", json=body) as resp:
            text = await resp.text()
        assert text.startswith("data: ") and text.endswith("data: [DONE]\n\n")
        assert '"stop_reason": "rejected: too long"' in text
        async with client.post(f"{url}/v1/completions", json={**body, "stream": False}) as resp:
            assert (await resp.json())["choices"][0]["finish_reason"] == "abort"

    proxy = run(rejected, prefill, decode)
    assert decode[0].got == [] and proxy.outcomes["rejected at prefill"] == 2

    prefill = [Stub("p0", status=500)]

    async def failed(url: str, client: ClientSession, proxy: PDProxy) -> None:
        async with client.post(f"{url}/v1/completions", json={"prompt": "x"}) as resp:
            assert resp.status == 500 and (await resp.json())["error"]["message"] == "boom"
        async with client.post(f"{url}/v1/completions", data=b"{nope") as resp:
            assert resp.status == 400

    run(failed, prefill, decode)
    assert decode[0].got == []


def test_sglang_s_protocol_sends_both_legs_with_the_prefill_s_bootstrap_address() -> None:
    prefill, decode = [Stub("p0"), Stub("p1")], [Stub("d0"), Stub("d1")]
    policy = ByLength()
    texts: list[str] = []

    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        for n, stream in ((4, True), (5, False), (7, True)):
            body = {"prompt": list(range(n)), "max_tokens": 9, "stream": stream}
            async with client.post(f"{url}/v1/completions", json=body) as resp:
                assert resp.status == 200
                texts.append(await resp.text())

    proxy = run(scenario, prefill, decode, policy, protocol="sglang", bootstrap_ports=[71, 72])
    # the policy's choice, per pool, with the prefill leg's one token
    assert [len(b["prompt"]) for b in prefill[1].got] == [5, 7]
    assert [len(b["prompt"]) for b in decode[0].got] == [4]
    assert policy.seen[:2] == [
        ("prefill", 4, 1, ("prefill", "prefill")),
        ("decode", 4, 9, ("decode", "decode")),
    ]
    rooms = set()
    by_room = {b["bootstrap_room"]: b for s in decode for b in s.got}
    for stub, port in zip(prefill, (71, 72), strict=True):
        for leg in stub.got:
            assert leg["max_tokens"] == 1 and leg["stream"] is False
            assert "kv_transfer_params" not in leg
            assert (leg["bootstrap_host"], leg["bootstrap_port"]) == ("127.0.0.1", port)
            twin = by_room[leg["bootstrap_room"]]  # the decode leg names the same room
            assert twin["prompt"] == leg["prompt"] and twin["max_tokens"] == 9
            assert (twin["bootstrap_host"], twin["bootstrap_port"]) == ("127.0.0.1", port)
            rooms.add(leg["bootstrap_room"])
    assert len(rooms) == 3  # a fresh room per request
    assert '"by": "d0"' in texts[0] and json.loads(texts[1])["choices"][0]["text"] == "d1"
    assert proxy.outcomes["decoded"] == 3


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("prefill_says", ["abort", "503", "500"])
def test_sglang_s_decode_leg_is_closed_when_the_prefill_fails_first(
    stream: bool, prefill_says: str
) -> None:
    """The prefill's "no" (vLLM's finish reason abort, SGLang's 503) or failure, before
    the decode leg answers: the client's answer, as asked (SGLang streams a rejection
    as an error chunk); the decode leg is closed."""
    prefill = Stub("p0", reject=True) if prefill_says == "abort" else Stub("p0")
    prefill.status = 200 if prefill_says == "abort" else int(prefill_says)
    decode = Stub("d0", hold=True)  # answers nothing until its client goes

    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        body = {"prompt": "a b", "max_tokens": 4, "stream": stream}
        async with client.post(f"{url}/v1/completions", json=body) as resp:
            text = await resp.text()
        if prefill_says == "500":
            assert resp.status == 500 and "boom" in text
        elif stream:
            assert resp.status == 200 and text.endswith("data: [DONE]\n\n")
            assert text.startswith("data: ") and "rejected: too long" in text
            if prefill_says == "503":
                assert json.loads(text.split("\n")[0][6:])["error"]["code"] == 503
        elif prefill_says == "503":
            assert resp.status == 503 and json.loads(text)["message"] == "rejected: too long"
        else:
            assert json.loads(text)["choices"][0]["finish_reason"] == "abort"
        for _ in range(200):  # the decode stub sees its connection go
            if decode.closed:
                break
            await asyncio.sleep(0.01)

    proxy = run(scenario, [prefill], [decode], protocol="sglang")
    assert decode.closed == [True] and len(decode.got) == 1
    outcome = "prefill failed" if prefill_says == "500" else "rejected at prefill"
    assert proxy.outcomes[outcome] == 1 and proxy.pools["decode"][0].load.in_flight == 0


def test_the_decode_leg_s_outcome_is_read_from_its_status_and_first_bytes() -> None:
    error = b'data: {"error": {"message": "rejected: too long", "code": 503}}\n\n'
    assert _decode_outcome(200, error) == "rejected at decode"  # SGLang, streamed
    assert _decode_outcome(503, b'{"message": "rejected: too long"}') == "rejected at decode"
    assert _decode_outcome(200, b'data: {"choices": []}\n\n') == "decoded"
    assert _decode_outcome(200, b'data: {"error": {"message": "boom"}}') == "decode failed"
    assert _decode_outcome(500, b"rejected: not SGLang's") == "decode failed"


def test_an_unreachable_decode_instance_is_a_502_naming_it() -> None:
    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        async with client.post(f"{url}/v1/completions", json={"prompt": "x y"}) as resp:
            assert resp.status == 502
            message = (await resp.json())["error"]["message"]
        assert message.startswith("decode instance http://127.0.0.1:9: ")
        assert proxy.pools["decode"][0].load.in_flight == 0

    run(scenario, [Stub("p0")], [], dead_decode=True)


def test_the_router_sees_each_server_s_gauges_and_models_come_from_decode() -> None:
    async def scenario(url: str, client: ClientSession, proxy: PDProxy) -> None:
        for _ in range(100):
            if proxy.pools["decode"][0].load.reads:
                break
            await asyncio.sleep(0.02)
        engine = proxy.pools["decode"][0].engine
        assert (engine.num_running, engine.num_waiting) == (3, 2)
        assert (engine.kv_blocks_total, engine.kv_blocks_free, engine.block_size) == (400, 300, 32)
        async with client.get(f"{url}/v1/models") as resp:
            assert (await resp.json())["data"][0]["id"] == "d0"

    run(scenario, [Stub("p0")], [Stub("d0")], interval=0.05)


def test_load_counts_in_flight_requests_the_gauges_have_not_seen() -> None:
    load = Load(0.0)
    assert (load.num_running, load.num_waiting, load.kv_blocks_total, load.block_size) == (
        0, 0, 0, 16)  # fmt: skip
    load.in_flight = 7
    load.gauges = parse_metrics(METRICS_PAGE)
    assert (load.num_running, load.num_waiting) == (5, 2)
    load.in_flight = 1
    assert (load.num_running, load.num_waiting) == (3, 2)
    with pytest.raises(AttributeError):
        load.num_running = 3  # type: ignore[misc]


SGLANG_PAGE = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="decode",model_name="m",tp_rank="0"} 4.0
sglang:num_queue_reqs{engine_type="decode",model_name="m",tp_rank="0"} 1.0
sglang:num_decode_prealloc_queue_reqs{engine_type="decode",model_name="m",tp_rank="0"} 2.0
sglang:num_decode_transfer_queue_reqs{engine_type="decode",model_name="m",tp_rank="0"} 3.0
sglang:num_pages{engine_type="decode",model_name="m",tp_rank="0"} 4096.0
sglang:page_size{engine_type="decode",model_name="m",tp_rank="0"} 1.0
sglang:token_usage{engine_type="decode",model_name="m",tp_rank="0"} 0.25
"""


def test_load_reads_sglang_s_gauges_queues_of_a_disaggregated_server_included() -> None:
    load = Load(0.0)
    load.gauges = parse_metrics(SGLANG_PAGE)
    assert (load.num_running, load.num_waiting) == (4, 6)
    assert (load.kv_blocks_total, load.kv_blocks_free, load.block_size) == (4096, 3072, 1)
    load.in_flight = 12
    assert (load.num_running, load.num_waiting) == (6, 6)


def test_request_view_reads_what_the_body_claims() -> None:
    assert prompt_tokens({"prompt": [5, 6, 7]}) == 3
    assert prompt_tokens({"prompt": [[5, 6], [1]]}) == 2
    assert prompt_tokens({"prompt": "one two  three"}) == 3
    chat = {"messages": [{"content": "a b"}, {"content": [{"type": "text", "text": "c"}]}]}
    assert prompt_tokens(chat) == 3
    body = {"prompt": "a", "priority": True, "max_completion_tokens": 5,
            "vllm_xargs": {"slo_ttft_ms": 300, "slo_tpot_ms": "fast"}}  # fmt: skip
    view = request_view(body, None, "r1", 2.5)
    assert (view.tenant, view.priority, view.max_tokens) == ("default", 0, 5)
    assert view.arrival_time == 2.5
    assert (view.slo_ttft_ms, view.slo_tpot_ms) == (300.0, None)
    assert request_view({"priority": -3}, "t", "r", 0).priority == -3
    assert request_view({}, "t", "r", 0).max_tokens == 16


def test_prefill_body_leaves_the_client_s_body_alone() -> None:
    body = {"prompt": "x", "max_tokens": 50, "max_completion_tokens": 50, "stream": True,
            "min_completion_tokens": 3}  # fmt: skip
    leg = prefill_body(body)
    assert (leg["max_tokens"], leg["max_completion_tokens"], leg["stream"]) == (1, 1, False)
    assert "min_completion_tokens" not in leg and body["max_tokens"] == 50


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--policy", "least-loaded", "--decode", "http://h:1"], "no --prefill URL"),
        (["--policy", "least-loaded", "--prefill", "h:1", "--decode", "http://h:2"],
         "--prefill 'h:1' is not a server URL"),
        (["--policy", "least-loaded", "--prefill", "http://h:x", "--decode", "http://h:2"],
         "the port is not a number"),
        (["--policy", "least-loaded", "--prefill", "http://h:1", "http://h:1/", "--decode",
          "http://h:2"], "is given twice"),
        (["--policy", "nope", "--prefill", "http://h:1", "--decode", "http://h:2"],
         "unknown policy 'nope'"),
        (["--prefill", "http://h:1"], "the following arguments are required: --policy"),
        (["--policy", "fcfs", "--prefill", "http://h:1", "--decode", "http://h:2",
          "--protocol", "nixl"], "--protocol 'nixl': valid values are vllm, sglang"),
        (["--policy", "fcfs", "--prefill", "http://h:1", "--decode", "http://h:2",
          "--bootstrap-port", "8998"], "--bootstrap-port is SGLang's: add --protocol sglang"),
        (["--policy", "fcfs", "--prefill", "http://h:1", "http://h:3", "--decode", "http://h:2",
          "--protocol", "sglang", "--bootstrap-port", "8998"],
         "gives 1 ports for 2 --prefill servers"),
        (["--policy", "fcfs", "--prefill", "http://h:1", "--decode", "http://h:2",
          "--protocol", "sglang", "--bootstrap-port", "0"], "--bootstrap-port 0 is not a port"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_status_2(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        raise SystemExit(main(args))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert err.startswith("python -m schedkit.edge.pd: error: ")


def test_module_runs_and_refuses_without_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "schedkit.edge.pd", "--policy", "least-loaded", "--prefill",
         "http://127.0.0.1:1", "--decode", "ftp://x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "python -m schedkit.edge.pd: error: --decode 'ftp://x' is not a server URL; write e.g."
        " http://127.0.0.1:8100"
    ]
