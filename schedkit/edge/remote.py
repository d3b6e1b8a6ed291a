"""What a router outside the engines sees: views of remote engine servers and of the
HTTP requests sent to them (``schedkit.edge.pd`` routes with them).

- ``ProxyRequest``: a ``RequestView`` of an OpenAI request body (``request_view``).
- ``Load``: an ``EngineView`` of a server from what the router sent it and its
  Prometheus ``/metrics`` gauges (``parse_metrics``; vLLM's names, or SGLang's).
- ``Instance``: a ``ReplicaView`` of one server of a pool, with its role.
- ``block_hashes``: a prompt's chained block hashes, as a prefix cache names them.
- ``connector``: the client connection pool for sending requests to engine servers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedkit.views import EngineView, RequestView

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_MAX_TOKENS", "KEEPALIVE_S", "Instance", "Load", "ProxyRequest",
           "block_hashes", "connector", "parse_metrics", "prompt_tokens",
           "request_view"]  # fmt: skip

DEFAULT_MAX_TOKENS = 16  # vLLM's completions default
KEEPALIVE_S = 2.0  # the longest a pooled connection idles before a request reuses it
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """A ``RequestView`` of a request the proxy routes. ``num_prompt_tokens`` is exact
    for a prompt of token ids; for text it counts whitespace-separated words (the proxy
    has no tokenizer). Nothing has been computed or cached yet."""

    request_id: str
    tenant: str
    priority: int
    arrival_time: float
    num_prompt_tokens: int
    max_tokens: int
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    num_cached_tokens: int = 0
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_preemptions: int = 0
    block_hashes: tuple[int, ...] = ()


def connector() -> aiohttp.TCPConnector:
    """An unbounded pool whose connections are reused only while idle under
    ``KEEPALIVE_S``. Engine servers close idle ones after 5 s (uvicorn's default, under
    vLLM and SGLang), and a request written to one as it closes is lost ("Server
    disconnected"); aiohttp hands out its oldest idle connection first, so under load
    every reuse came near that edge. Call it inside a running event loop."""
    import aiohttp

    return aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # chat content parts
        return sum(_words(p.get("text", "")) for p in value if isinstance(p, dict))
    return 0


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt's length: token ids counted, text as its words (see ``ProxyRequest``)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int):
            return len(prompt)
        prompt = first  # a batch: the first prompt
        if isinstance(prompt, list):
            return len(prompt)
    if isinstance(prompt, str):
        return _words(prompt)
    messages = body.get("messages")
    if isinstance(messages, list):
        return sum(_words(m.get("content")) for m in messages if isinstance(m, dict))
    return 0


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def request_view(
    body: Mapping[str, Any], tenant: str | None, request_id: str, arrival: float
) -> ProxyRequest:
    """What the router sees of ``body`` (the client's claims, unverified)."""
    xargs = body.get("vllm_xargs")
    xargs = xargs if isinstance(xargs, dict) else {}
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    priority = body.get("priority")
    return ProxyRequest(
        request_id=request_id,
        tenant=tenant or "default",
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        arrival_time=arrival,
        num_prompt_tokens=prompt_tokens(body),
        max_tokens=limit if isinstance(limit, int) and limit > 0 else DEFAULT_MAX_TOKENS,
        slo_ttft_ms=_number(xargs.get("slo_ttft_ms")),
        slo_tpot_ms=_number(xargs.get("slo_tpot_ms")),
    )


def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of ``tokens``' full blocks, in order (as vLLM's prefix cache
    names them: each block's hash covers every token before it; a partial last block has
    none). A router's prefix index and ``schedkit serve sim``'s cache hash prompts so."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        out.append(parent)
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """The samples of a Prometheus text page, summed per metric name over their labels
    (several engines or models behind one server add up); ``cache_config_info``'s
    ``num_gpu_blocks`` and ``block_size`` labels become ``vllm:num_gpu_blocks`` and
    ``vllm:block_size``. Lines it cannot read are skipped."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        found[name] = found.get(name, 0.0) + number
        if name == "vllm:cache_config_info" and labels:
            info = dict(_LABEL.findall(labels))
            for key in ("num_gpu_blocks", "block_size"):
                if info.get(key, "").isdigit():
                    found[f"vllm:{key}"] = float(info[key])
    return found


SGLANG_QUEUES = (
    "num_queue_reqs",
    "num_prefill_bootstrap_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
)
"""SGLang's gauges of requests queued on a server (``--enable-metrics``)."""


class Load:
    """An ``EngineView`` of one server as the proxy knows it: the requests it has sent
    there and not yet seen answered, and the server's ``/metrics`` gauges as last read.

    Running plus waiting is the larger of the proxy's in-flight count (fresh, but blind
    to other clients) and the server's gauges (everyone's, but as old as the last read);
    waiting is the server's figure, at most that sum. KV blocks come from vLLM's
    ``cache_config_info`` and ``kv_cache_usage_perc``, or SGLang's ``num_pages``,
    ``page_size`` and ``token_usage`` (0 total until first read).
    ``step_index`` is the number of reads: the proxy sees no engine steps."""

    def __init__(self, started: float) -> None:
        self._started = started
        self.in_flight = 0
        self.gauges: dict[str, float] = {}
        self.reads = 0

    @property
    def clock(self) -> float:
        return time.monotonic() - self._started

    @property
    def kv_blocks_total(self) -> int:
        return int(self._gauge("vllm:num_gpu_blocks", "sglang:num_pages"))

    @property
    def kv_blocks_free(self) -> int:
        used = self._gauge("vllm:kv_cache_usage_perc", "sglang:token_usage")
        return round(self.kv_blocks_total * (1.0 - min(max(used, 0.0), 1.0)))

    @property
    def block_size(self) -> int:
        return int(self._gauge("vllm:block_size", "sglang:page_size") or 16)

    @property
    def num_running(self) -> int:
        return self._total() - self.num_waiting

    @property
    def num_waiting(self) -> int:
        return min(int(self._waiting()), self._total())

    @property
    def step_index(self) -> int:
        return self.reads

    def cached_tokens(self, request: RequestView) -> int:
        """0: the proxy does not know what the server's prefix cache holds."""
        return 0

    def _gauge(self, vllm: str, sglang: str) -> float:
        """A gauge by vLLM's name, else SGLang's (0 when the server has neither)."""
        return self.gauges.get(vllm, self.gauges.get(sglang, 0.0))

    def _waiting(self) -> float:
        """Queued requests: vLLM's waiting; SGLang's waiting queue, plus, on a
        disaggregated server, those bootstrapping (prefill) or awaiting KV space or
        their transfer (decode)."""
        if "vllm:num_requests_waiting" in self.gauges:
            return self.gauges["vllm:num_requests_waiting"]
        return sum(self.gauges.get(f"sglang:{name}", 0.0) for name in SGLANG_QUEUES)

    def _total(self) -> int:
        running = self._gauge("vllm:num_requests_running", "sglang:num_running_reqs")
        return max(self.in_flight, int(running + self._waiting()))


class Instance:
    """A ``ReplicaView`` of one server of a pool. ``cached_tokens`` is 0: the proxy does
    not know what a server's prefix cache holds."""

    def __init__(self, index: int, role: str, url: str, started: float) -> None:
        self._index, self._role, self.url = index, role, url
        self.load = Load(started)

    @property
    def index(self) -> int:
        return self._index

    @property
    def role(self) -> str:
        return self._role

    @property
    def engine(self) -> EngineView:
        return self.load

    def cached_tokens(self, request: RequestView) -> int:
        return 0

    def __repr__(self) -> str:
        return f"Instance({self._role} {self._index}: {self.url})"
