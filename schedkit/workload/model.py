"""The request model: :class:`TraceRequest` (one request as an engine receives it) and
:class:`Workload` (an immutable stream of them, sorted by arrival), with the operations the
bench applies (rate scaling, truncation, windows, default SLOs, a summary)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from schedkit.errors import SchedkitError, quote


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a workload, as the engine receives it."""

    request_id: str
    arrival_s: float  # seconds from the start of the trace
    prompt_tokens: int
    output_tokens: int  # tokens the request generates (its max_tokens in replay)
    tenant: str = "default"
    priority: int = 0  # lower is more important, as in vLLM
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    hash_ids: tuple[int, ...] = ()  # prefix block hashes, one per hash_block_tokens prompt tokens
    deadline_s: float | None = None  # finish within this many seconds of arrival (batch work)


@dataclass(frozen=True)
class Workload:
    """An immutable request stream, sorted by arrival (ties keep their given order)."""

    name: str
    requests: tuple[TraceRequest, ...]
    hash_block_tokens: int = 0  # 512 for Mooncake; 0 = requests carry no shared prefixes
    source: str = ""  # attribution line or generator spec
    mixed: bool = False  # a mix of two workloads by class (schedkit.workload.mix)

    def __post_init__(self) -> None:
        requests = tuple(self.requests)
        if any(a.arrival_s > b.arrival_s for a, b in itertools.pairwise(requests)):
            requests = tuple(sorted(requests, key=lambda r: r.arrival_s))
        # Frozen dataclass: normalising a field in __post_init__ needs object.__setattr__.
        object.__setattr__(self, "requests", requests)

    def scaled(self, rate_scale: float) -> Workload:
        """The same requests with arrivals divided by ``rate_scale`` (2.0 = twice the rate)."""
        if not isinstance(rate_scale, int | float) or not 0 < rate_scale < math.inf:
            raise SchedkitError(
                f"rate_scale must be a finite number > 0 (2.0 doubles the arrival rate, 0.5"
                f" halves it), got {quote(rate_scale)}"
            )
        if rate_scale == 1:
            return self
        last = self.requests[-1].arrival_s if self.requests else 0.0
        if not math.isfinite(last / rate_scale):
            raise SchedkitError(
                f"--rate-scale {rate_scale:g} stretches {self.name}'s last arrival ({last:g} s)"
                " past any finite time; use a rate scale such as 0.5 (half the rate)"
            )
        requests = tuple(
            dataclasses.replace(r, arrival_s=r.arrival_s / rate_scale) for r in self.requests
        )
        source = f"{self.source}; arrival rate x{rate_scale:g}" if self.source else ""
        return dataclasses.replace(self, requests=requests, source=source)

    def at_once(self) -> Workload:
        """The same requests, every one arriving at 0 s in arrival order (``vllm bench
        serve --request-rate inf``)."""
        requests = tuple(dataclasses.replace(r, arrival_s=0.0) for r in self.requests)
        source = f"{self.source}; every request at 0 s" if self.source else ""
        return dataclasses.replace(self, requests=requests, source=source)

    def truncated(self, max_requests: int) -> Workload:
        """The first ``max_requests`` requests by arrival."""
        if isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 1:
            raise SchedkitError(
                f"max_requests must be a positive integer (how many requests to keep from the"
                f" start of the workload), got {quote(max_requests)}"
            )
        if max_requests >= len(self.requests):
            return self
        return dataclasses.replace(self, requests=self.requests[:max_requests])

    def windowed(self, start_s: float, end_s: float) -> Workload:
        """The requests arriving in ``[start_s, end_s)`` of the trace's clock, shifted so
        that ``start_s`` becomes 0."""
        reqs = self.requests
        first, last = (reqs[0].arrival_s, reqs[-1].arrival_s) if reqs else (0.0, 0.0)
        kept = tuple(
            dataclasses.replace(r, arrival_s=r.arrival_s - start_s)
            for r in reqs
            if start_s <= r.arrival_s < end_s
        )
        if not (math.isfinite(start_s) and start_s < end_s) or not kept:
            raise SchedkitError(
                f"--window {start_s:g}:{end_s:g} holds no request of {self.name} (arrivals"
                f" {first:,.1f} .. {last:,.1f} s); pass START:END seconds with START < END"
                " inside that range"
            )
        source = f"{self.source}; window {start_s:g}..{end_s:g} s" if self.source else ""
        return dataclasses.replace(self, requests=kept, source=source)

    def busiest(self, count: int) -> tuple[float, float]:
        """Arrival times of the first and last of the ``count`` consecutive requests that
        arrive closest together (the trace's busiest stretch of that size)."""
        times = [r.arrival_s for r in self.requests]
        count = max(1, min(count, len(times)))
        spans = [times[i + count - 1] - times[i] for i in range(len(times) - count + 1)]
        best = min(range(len(spans)), key=spans.__getitem__)
        return times[best], times[best + count - 1]

    def with_default_slos(self, ttft_ms: float | None, tpot_ms: float | None) -> Workload:
        """The same requests, each SLO the workload leaves ``None`` set to ``ttft_ms`` /
        ``tpot_ms``; a request's own SLO is kept (``None`` arguments change nothing)."""
        for name, value in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms)):
            if value is not None and not (
                isinstance(value, int | float)
                and not isinstance(value, bool)
                and 0 < value < math.inf
            ):
                raise SchedkitError(
                    f"default SLO {name} must be a finite number of milliseconds > 0 or None,"
                    f" got {quote(value)}"
                )
        if not any(
            (ttft_ms is not None and r.slo_ttft_ms is None)
            or (tpot_ms is not None and r.slo_tpot_ms is None)
            for r in self.requests
        ):
            return self
        requests = tuple(
            dataclasses.replace(
                r,
                slo_ttft_ms=r.slo_ttft_ms if r.slo_ttft_ms is not None else ttft_ms,
                slo_tpot_ms=r.slo_tpot_ms if r.slo_tpot_ms is not None else tpot_ms,
            )
            for r in self.requests
        )
        return dataclasses.replace(self, requests=requests)

    def summary(self) -> dict[str, object]:
        """Size, span, rate and length percentiles, for reports and ``schedkit`` listings."""
        reqs = self.requests
        span = reqs[-1].arrival_s - reqs[0].arrival_s if reqs else 0.0
        prompts = sorted(r.prompt_tokens for r in reqs)
        outputs = sorted(r.output_tokens for r in reqs)
        return {
            "name": self.name,
            "source": self.source,
            "requests": len(reqs),
            "span_s": span,
            "rate_rps": len(reqs) / span if span > 0 else 0.0,
            "prompt_p50": _percentile(prompts, 0.50),
            "prompt_p90": _percentile(prompts, 0.90),
            "prompt_max": prompts[-1] if prompts else 0,
            "output_p50": _percentile(outputs, 0.50),
            "output_p90": _percentile(outputs, 0.90),
            "output_max": outputs[-1] if outputs else 0,
            "tenants": sorted({r.tenant for r in reqs}),
            "hash_block_tokens": self.hash_block_tokens,
        }


def _percentile(ordered: list[int], q: float) -> int:
    """Nearest-rank percentile of an ascending list (0 when empty)."""
    if not ordered:
        return 0
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
