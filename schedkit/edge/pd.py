"""A prefill/decode proxy: schedkit's router in front of a disaggregated deployment.

``python -m schedkit.edge.pd --policy P --prefill URL [...] --decode URL [...] --port N``
serves ``POST /v1/completions`` and ``/v1/chat/completions`` the way vLLM's toy proxy
(``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``) does, with the choice
of instance made by the policy: for each request

1. the policy's ``route_request`` picks a prefill instance (``ReplicaView.role``
   ``"prefill"``); the request goes there with ``max_tokens=1``, not streamed, with
   ``kv_transfer_params`` asking for a remote decode, and the proxy waits for it;
2. ``route_request`` picks a decode instance (role ``"decode"``), which gets the
   original request (plus the ``kv_transfer_params`` the prefill answered, if any: NIXL
   needs them, the ExampleConnector finds the KV by the prompt); its answer, streamed
   or not, goes to the client as it comes.

A policy with no answer (or none implementing ``route_request``) gets round-robin in
each pool, as in the simulator (``schedkit.sim.disagg``). A prefill whose answer is not
200 is the client's answer; a prefill that the server's admission policy rejected
(``finish_reason`` ``abort``, ``stop_reason`` ``rejected: ...``) ends there too, with that
choice sent as the client asked it (a one-chunk stream, or the JSON). The router sees
the body's claims (priority, ``vllm_xargs`` SLO targets) and the tenant header as sent:
the servers' own trust edge decides what their schedulers believe.

``--protocol sglang`` speaks SGLang's instead (``sglang_router``'s mini load balancer):
both instances are chosen at arrival (prefill first), and the request goes to both at
once with ``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` naming the prefill
instance's bootstrap server (``--bootstrap-port``, one per prefill URL; SGLang's default
8998), so the decode instance pre-allocates KV while the prefill runs. The prefill leg
is sent with ``max_tokens=1``, not streamed (what it computes); the client gets the
decode instance's answer, or the prefill's where that fails or is rejected before the
decode answers (the decode leg is then closed, which aborts it there).

``GET /metrics`` gives the proxy's counts in Prometheus' text format (requests per
instance and who chose it, prefill time, in flight); ``GET /v1/models`` is the first
decode instance's; ``GET /health`` answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from schedkit.config import load_config
from schedkit.edge.remote import Instance, connector, parse_metrics, request_view
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.views import RequestView

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import ClientSession, web

__all__ = ["PDProxy", "build", "main", "prefill_body"]

log = logging.getLogger("schedkit.pd")

ROLES = ("prefill", "decode")
PROTOCOLS = ("vllm", "sglang")
SGLANG_BOOTSTRAP_PORT = 8998  # SGLang's --disaggregation-bootstrap-port default
# Headers a proxy must not pass on (RFC 9110 hop-by-hop, and what aiohttp sets itself).
_HOP = frozenset(("host", "content-length", "transfer-encoding", "connection", "keep-alive"))


def check_url(url: str, flag: str) -> str:
    """``url`` without a trailing slash, or a :class:`SchedkitError` naming ``flag``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SchedkitError(f"{flag} {url!r} is not a server URL; write e.g. http://127.0.0.1:8100")
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        raise SchedkitError(f"{flag} {url!r}: the port is not a number from 0 to 65535") from None
    return url.rstrip("/")


def _error(status: int, message: str) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": "ProxyError", "code": status}}
    ).encode()


def _rejected(answer: Mapping[str, Any]) -> bool:
    """Whether the prefill's answer is the server's admission policy rejecting it."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    stop = choices[0].get("stop_reason")
    return choices[0].get("finish_reason") == "abort" and isinstance(stop, str)


def prefill_body(body: Mapping[str, Any], protocol: str = "vllm") -> dict[str, Any]:
    """The prefill leg of ``body``: one token, not streamed; for vLLM with KV kept for a
    remote decode (SGLang's bootstrap fields are in ``body`` already)."""
    leg = {k: v for k, v in body.items() if k not in ("stream_options", "min_tokens")}
    leg.update(stream=False, max_tokens=1)
    if "max_completion_tokens" in leg:
        leg["max_completion_tokens"] = 1
    leg.pop("min_completion_tokens", None)
    if protocol == "sglang":
        return leg
    leg["kv_transfer_params"] = {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None,
    }  # fmt: skip
    return leg


class PDProxy:
    """Prefill and decode pools behind ``router`` (``route_request`` once per pool)."""

    def __init__(
        self,
        router: PolicyFacade,
        prefill: Sequence[str],
        decode: Sequence[str],
        *,
        metrics_interval_s: float = 1.0,
        timeout_s: float = 600.0,
        tenant_header: str = "x-tenant-id",
        protocol: str = "vllm",
        bootstrap_ports: Sequence[int] = (),
    ) -> None:
        started = time.monotonic()
        self.protocol = protocol
        self.bootstrap_ports = list(bootstrap_ports) or [SGLANG_BOOTSTRAP_PORT] * len(prefill)
        self.router = router
        self.pools = {
            role: [Instance(i, role, url, started) for i, url in enumerate(urls)]
            for role, urls in zip(ROLES, (prefill, decode), strict=True)
        }
        self.metrics_interval_s = metrics_interval_s
        self.timeout_s = timeout_s
        self.tenant_header = tenant_header
        self.started = started
        self.routed: Counter[tuple[str, int, str]] = Counter()  # (role, index, chosen by)
        self.prefill_seconds: dict[int, float] = dict.fromkeys(range(len(prefill)), 0.0)
        self.outcomes: Counter[str] = Counter()
        self._turns = dict.fromkeys(ROLES, 0)
        self._session: ClientSession | None = None

    # -- routing -----------------------------------------------------------------------

    def choose(self, request: RequestView, role: str) -> Instance:
        """The instance of pool ``role`` the policy picks for ``request`` (round-robin
        where it has no answer), counted."""
        pool = self.pools[role]
        chosen = self.router.route(request, pool) if self.router.has_route else None
        by = "policy"
        if chosen is None:
            chosen, by = self._turns[role], "round-robin"
            self._turns[role] = (chosen + 1) % len(pool)
        self.routed[role, chosen, by] += 1
        return pool[chosen]

    # -- serving -----------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:

        try:
            body = json.loads(await request.read())
        except ValueError:
            return self._fail(400, "the body is not JSON", "bad request")
        if not isinstance(body, dict):
            return self._fail(400, "the body is not a JSON object", "bad request")
        rid = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers["X-Request-Id"] = rid
        view = request_view(body, request.headers.get(self.tenant_header), rid, self._clock())
        prefill = self.choose(replace(view, max_tokens=1), "prefill")  # as it is sent there
        if self.protocol == "sglang":
            decode = self.choose(view, "decode")
            body = {**body, **self._bootstrap(prefill)}
            leg = asyncio.create_task(self._prefill(prefill, request.path, body, headers))
            return await self._relay(request, decode, body, headers, leg)
        status, raw = await self._prefill(prefill, request.path, body, headers)
        ended = self._prefill_refused(body, status, raw)
        if ended is not None:
            return ended
        params = json.loads(raw).get("kv_transfer_params")
        if params:
            body = {**body, "kv_transfer_params": params}
        decode = self.choose(view, "decode")
        return await self._relay(request, decode, body, headers)

    def _bootstrap(self, prefill: Instance) -> dict[str, Any]:
        """SGLang's fields naming ``prefill``'s bootstrap server and a fresh room."""
        host = urlsplit(prefill.url).hostname or ""
        return {
            "bootstrap_host": f"[{host}]" if ":" in host else host,
            "bootstrap_port": self.bootstrap_ports[prefill.index],
            "bootstrap_room": random.getrandbits(63),
        }

    async def _prefill(
        self, target: Instance, path: str, body: Mapping[str, Any], headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """The prefill leg on ``target``: its status and body (502 when unreachable, or
        a 200 that is not a JSON object)."""
        import aiohttp

        target.load.in_flight += 1
        began = time.monotonic()
        try:
            async with self._client().post(
                target.url + path, json=prefill_body(body, self.protocol), headers=headers
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return 502, _error(502, f"prefill instance {target.url}: {_describe(exc)}")
        finally:
            target.load.in_flight -= 1
            self.prefill_seconds[target.index] += time.monotonic() - began
        if status == 200:
            try:
                ok = isinstance(json.loads(raw), dict)
            except ValueError:
                ok = False
            if not ok:
                return 502, _error(502, f"prefill instance {target.url}: not a JSON answer")
        return status, raw

    async def _relay(
        self,
        request: web.Request,
        target: Instance,
        body: dict[str, Any],
        headers: dict[str, str],
        prefill: asyncio.Task[tuple[int, bytes]] | None = None,
    ) -> web.StreamResponse:
        """The decode leg on ``target``, its answer passed to the client as it comes.
        With ``prefill`` (SGLang's legs, sent at once) a prefill that fails or is rejected
        before the decode answers is the client's answer, and the decode leg is closed."""
        import aiohttp
        from aiohttp import web

        target.load.in_flight += 1
        out: web.StreamResponse | None = None
        head = asyncio.ensure_future(self._open(target.url + request.path, body, headers))
        resp: aiohttp.ClientResponse | None = None
        try:
            ended = await self._prefill_ended_first(body, prefill, head)
            if ended is not None:
                return ended
            resp, first = await head
            kind = resp.headers.get("Content-Type", "application/json")
            out = web.StreamResponse(status=resp.status, headers={"Content-Type": kind})
            await out.prepare(request)
            await out.write(first)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            self.outcomes[_decode_outcome(resp.status, first)] += 1
            return out
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.outcomes["decode failed"] += 1
            message = f"decode instance {target.url}: {_describe(exc)}"
            if out is not None and out.prepared:  # cut mid-answer: the client sees it end
                raise ConnectionError(message) from exc
            return self._fail(502, message, "")
        finally:
            target.load.in_flight -= 1
            if resp is not None:
                resp.close()
            for task in (head, prefill):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(*(t for t in (head, prefill) if t), return_exceptions=True)

    async def _open(
        self, url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """A POST's response and its first bytes (cancelled: the connection closes)."""
        resp = await self._client().post(url, json=body, headers=headers)
        try:
            return resp, await resp.content.readany()
        except BaseException:
            resp.close()
            raise

    async def _prefill_ended_first(
        self,
        body: Mapping[str, Any],
        prefill: asyncio.Task[tuple[int, bytes]] | None,
        head: asyncio.Future[Any],
    ) -> web.Response | None:
        """The prefill's answer when it failed or was rejected before the decode leg's
        first bytes came (``head`` is then cancelled); None to relay the decode leg."""
        if prefill is None:
            return None
        await asyncio.wait((prefill, head), return_when=asyncio.FIRST_COMPLETED)
        if head.done() or not prefill.done():
            return None
        ended = self._prefill_refused(body, *prefill.result())
        if ended is not None:
            head.cancel()
            await asyncio.gather(head, return_exceptions=True)
        return ended

    def _prefill_refused(
        self, body: Mapping[str, Any], status: int, raw: bytes
    ) -> web.Response | None:
        """The client's answer when the prefill leg failed or was rejected (counted), as
        the client asked it; None when it went through. A rejection is vLLM's finish
        reason ``abort``, or SGLang's 503 naming it (streamed, as SGLang streams one: an
        error chunk, then ``[DONE]``)."""
        from aiohttp import web

        if status == 200:
            answer = json.loads(raw)
            if not _rejected(answer):
                return None
            self.outcomes["rejected at prefill"] += 1
            return _as_asked(body, answer)
        refused = status == 503 and b"rejected: " in raw
        self.outcomes["rejected at prefill" if refused else "prefill failed"] += 1
        if refused and body.get("stream"):
            try:
                error = json.loads(raw)
            except ValueError:
                error = {"message": raw.decode(errors="replace"), "code": status}
            text = f"data: {json.dumps({'error': error})}\n\ndata: [DONE]\n\n"
            return web.Response(text=text, content_type="text/event-stream")
        return web.Response(status=status, body=raw, content_type="application/json")

    def _fail(self, status: int, message: str, outcome: str) -> web.Response:
        from aiohttp import web

        if outcome:
            self.outcomes[outcome] += 1
        return web.Response(
            status=status, body=_error(status, message), content_type="application/json"
        )

    async def models(self, request: web.Request) -> web.Response:
        from aiohttp import web

        target = self.pools["decode"][0]
        try:
            async with self._client().get(target.url + "/v1/models") as resp:
                raw, status = await resp.read(), resp.status
        except Exception as exc:  # any failure is the client's 502
            return self._fail(502, f"decode instance {target.url}: {_describe(exc)}", "")
        return web.Response(status=status, body=raw, content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(text=self.metrics_text(), content_type="text/plain")

    def metrics_text(self) -> str:
        """The proxy's own series, in Prometheus' text format."""
        lines = ["# TYPE schedkit_pd_routed_total counter"]
        for (role, index, by), n in sorted(self.routed.items()):
            url = self.pools[role][index].url
            lines.append(
                f'schedkit_pd_routed_total{{role="{role}",index="{index}",instance="{url}",'
                f'chosen_by="{by}"}} {n}'
            )
        lines.append("# TYPE schedkit_pd_prefill_seconds_total counter")
        for index, seconds in sorted(self.prefill_seconds.items()):
            url = self.pools["prefill"][index].url
            lines.append(f'schedkit_pd_prefill_seconds_total{{instance="{url}"}} {seconds:.6f}')
        lines.append("# TYPE schedkit_pd_requests_total counter")
        for outcome, n in sorted(self.outcomes.items()):
            lines.append(f'schedkit_pd_requests_total{{outcome="{outcome}"}} {n}')
        lines.append("# TYPE schedkit_pd_in_flight gauge")
        for role, pool in self.pools.items():
            for inst in pool:
                lines.append(
                    f'schedkit_pd_in_flight{{role="{role}",instance="{inst.url}"}}'
                    f" {inst.load.in_flight}"
                )
        return "\n".join(lines) + "\n"

    # -- the server's life -----------------------------------------------------------

    def _client(self) -> ClientSession:
        assert self._session is not None, "the proxy's session starts with its app"
        return self._session

    def _clock(self) -> float:
        return time.monotonic() - self.started

    async def _read_gauges(self) -> None:
        """Every ``metrics_interval_s``, each server's ``/metrics`` gauges (a server that
        does not answer keeps its last ones)."""
        instances = [inst for pool in self.pools.values() for inst in pool]
        while True:
            for inst in instances:
                try:
                    async with self._client().get(inst.url + "/metrics") as resp:
                        if resp.status == 200:
                            inst.load.gauges = parse_metrics(await resp.text())
                            inst.load.reads += 1
                except Exception as exc:  # routing goes on with old figures
                    log.debug("pd: reading %s/metrics failed: %s", inst.url, _describe(exc))
            await asyncio.sleep(self.metrics_interval_s)

    def app(self) -> web.Application:
        """The aiohttp application: the routes, and the client session and gauge reader
        for the app's life."""
        import aiohttp
        from aiohttp import web

        async def lifetime(app: web.Application) -> Any:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector()) as session:
                self._session = session
                reader = None
                if self.metrics_interval_s > 0:
                    reader = asyncio.create_task(self._read_gauges())
                yield
                if reader is not None:
                    reader.cancel()
                    await asyncio.gather(reader, return_exceptions=True)
            self._session = None

        app = web.Application(client_max_size=64 << 20)
        app.cleanup_ctx.append(lifetime)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        return app


def _as_asked(body: Mapping[str, Any], answer: dict[str, Any]) -> web.Response:
    """``answer`` (a complete completion) in the form the client asked for."""
    from aiohttp import web

    if not body.get("stream"):
        return web.json_response(answer)
    text = f"data: {json.dumps(answer)}\n\ndata: [DONE]\n\n"
    return web.Response(text=text, content_type="text/event-stream")


def _decode_outcome(status: int, first: bytes) -> str:
    """How the decode leg ended, from its status and first bytes (SGLang answers an
    admission policy's "no" with a 503 naming it, or streamed, an error chunk)."""
    streamed_error = status == 200 and first.startswith(b'data: {"error"')
    if status == 200 and not streamed_error:
        return "decoded"
    refused = status in (200, 503) and b"rejected: " in first
    return "rejected at decode" if refused else "decode failed"


def _describe(exc: BaseException) -> str:
    return (str(exc).strip() or type(exc).__name__)[:200]


# -- the command line ------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m schedkit.edge.pd",
        description="A prefill/decode proxy: schedkit's route_request picks the prefill"
        " instance, then the decode instance, of each request (vLLM's toy proxy protocol,"
        " or SGLang's with --protocol sglang).",
    )
    parser.add_argument("--policy", required=True, help="a policy, composition or config file")
    parser.add_argument("--prefill", action="extend", nargs="+", default=[], metavar="URL")
    parser.add_argument("--decode", action="extend", nargs="+", default=[], metavar="URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--metrics-interval-s", type=float, default=1.0,
        help="read each server's /metrics gauges this often (0: never)",
    )  # fmt: skip
    parser.add_argument("--timeout-s", type=float, default=600.0, help="per request leg")
    parser.add_argument("--tenant-header", default="x-tenant-id")
    parser.add_argument(
        "--protocol", default="vllm",
        help="vllm: prefill, then decode with the prefill's kv_transfer_params (vLLM's"
        " connectors); sglang: both at once with bootstrap fields (SGLang's PD mode)",
    )  # fmt: skip
    parser.add_argument(
        "--bootstrap-port", action="extend", nargs="+", type=int, default=[], metavar="PORT",
        help="with --protocol sglang: each prefill server's --disaggregation-bootstrap-port,"
        f" in --prefill's order (default {SGLANG_BOOTSTRAP_PORT} for each)",
    )  # fmt: skip
    return parser


def build(args: argparse.Namespace) -> PDProxy:
    """The proxy ``args`` describe, or a :class:`SchedkitError` saying what is wrong."""
    pools: dict[str, list[str]] = {}
    for role in ROLES:
        urls = [check_url(u, f"--{role}") for u in getattr(args, role)]
        if not urls:
            raise SchedkitError(f"no --{role} URL: give each pool at least one server")
        twice = sorted({u for u in urls if urls.count(u) > 1})
        if twice:
            raise SchedkitError(f"--{role} {twice[0]} is given twice; list each server once")
        pools[role] = urls
    if not 0 < args.port < 65536:
        raise SchedkitError(f"--port {args.port} is not a port number (1-65535)")
    if args.metrics_interval_s < 0 or not args.timeout_s > 0:
        raise SchedkitError("--metrics-interval-s must be >= 0 and --timeout-s > 0")
    _check_protocol(args.protocol, args.bootstrap_port, len(pools["prefill"]))
    router = PolicyFacade.from_config(load_config(args.policy))
    return PDProxy(
        router,
        pools["prefill"],
        pools["decode"],
        metrics_interval_s=args.metrics_interval_s,
        timeout_s=args.timeout_s,
        tenant_header=args.tenant_header.lower(),
        protocol=args.protocol,
        bootstrap_ports=args.bootstrap_port,
    )


def _check_protocol(protocol: str, ports: Sequence[int], prefills: int) -> None:
    if protocol not in PROTOCOLS:
        raise SchedkitError(f"--protocol {protocol!r}: valid values are {', '.join(PROTOCOLS)}")
    if ports and protocol != "sglang":
        raise SchedkitError("--bootstrap-port is SGLang's: add --protocol sglang, or drop it")
    if ports and len(ports) != prefills:
        raise SchedkitError(
            f"--bootstrap-port gives {len(ports)} ports for {prefills} --prefill servers;"
            " give one per prefill server, in the same order"
        )
    bad = [p for p in ports if not 0 < p < 65536]
    if bad:
        raise SchedkitError(f"--bootstrap-port {bad[0]} is not a port number (1-65535)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy until interrupted; bad input is one line on stderr and status 2."""
    args = _parser().parse_args(argv)
    prog = "python -m schedkit.edge.pd"
    try:
        from aiohttp import web
    except ImportError:
        print(f"{prog}: error: needs aiohttp: pip install 'schedkit[live]'", file=sys.stderr)
        return 2
    try:
        proxy = build(args)
    except SchedkitError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log.info(
        "pd: policy %s, prefill %s, decode %s, on http://%s:%d",
        proxy.router.label,
        " ".join(i.url for i in proxy.pools["prefill"]),
        " ".join(i.url for i in proxy.pools["decode"]),
        args.host,
        args.port,
    )
    try:
        web.run_app(proxy.app(), host=args.host, port=args.port, print=None, access_log=None)
    except OSError as exc:
        print(f"{prog}: error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
