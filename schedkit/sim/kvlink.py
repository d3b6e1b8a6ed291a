"""The link a disaggregated deployment moves KV over, from prefill to decode instances.

A transfer of ``b`` bytes occupies the sending instance's egress and the receiving
instance's ingress for ``b / bandwidth`` seconds, starting once both are free (FIFO on
each, in the order transfers are asked for), then lands ``latency`` seconds later (setup,
completion notice). An instance of TP ``t`` moves its KV over ``t`` GPUs' links at once
(each rank sends its own heads); between a prefill instance of TP ``p`` and a decode
instance of TP ``d``, over ``min(p, d)``.

The presets' bandwidths are per GPU and direction, as vendors print them (the sources are
in ``FABRICS``); what a KV connector reaches of them is less: vLLM's MooncakeConnector
reached 18-71% of RoCE's line rate from 128- to 32K-token prompts (Mooncake's
``vllm-v1-pd-performance.md``). The measured preset ``mooncake-roce`` is that run's
large-transfer rate per GPU, with the fixed cost fitted to its table. Nominal presets
leave the fixed cost at that measured 0.6 ms for networks, and at zero over NVLink,
where no figure was found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schedkit.errors import SchedkitError
from schedkit.validation import unknown

__all__ = ["FABRICS", "Fabric", "KVLinks", "parse_kv_link"]


@dataclass(frozen=True, slots=True)
class Fabric:
    """A link per GPU: ``gbs`` GB/s a direction (10^9 bytes), ``latency_ms`` fixed per
    transfer, and where the figures come from."""

    gbs: float
    latency_ms: float
    source: str

    def describe(self) -> str:
        return f"{self.gbs:g} GB/s per GPU, {self.latency_ms:g} ms per transfer"


_MEASURED_MS = 0.6  # fitted intercept of Mooncake's vLLM 1P1D table (0.54 ms at 128 tokens)
FABRICS: dict[str, Fabric] = {
    "nvlink3": Fabric(300.0, 0.0, "A100 SXM: 600 GB/s both directions (NVIDIA A100 datasheet)"),
    "nvlink4": Fabric(450.0, 0.0, "H100/H200 SXM: 900 GB/s both directions (NVIDIA)"),
    "nvlink5": Fabric(900.0, 0.0, "B200: 1.8 TB/s both directions (NVIDIA NVLink page)"),
    "ib-hdr": Fabric(25.0, _MEASURED_MS, "ConnectX-6 HDR, 200 Gb/s per GPU"),
    "ib-ndr": Fabric(50.0, _MEASURED_MS, "ConnectX-7 NDR, 400 Gb/s per GPU"),
    "roce-200": Fabric(25.0, _MEASURED_MS, "200 GbE per GPU"),
    "roce-400": Fabric(50.0, _MEASURED_MS, "400 GbE per GPU"),
    "pcie4": Fabric(32.0, _MEASURED_MS, "PCIe 4.0 x16, 32 GB/s a direction"),
    "pcie5": Fabric(64.0, _MEASURED_MS, "PCIe 5.0 x16, 64 GB/s a direction"),
    "mooncake-roce": Fabric(
        17.8,
        _MEASURED_MS,
        "measured: vLLM 0.11 MooncakeConnector, H800 TP8 1P1D over 8x CX7 RoCE, 142 GB/s"
        " a node at 32K-token prompts (Mooncake docs, vllm-v1-pd-performance.md)",
    ),
}

_CUSTOM = re.compile(
    r"^(?P<gbs>[0-9.eE+-]+)\s*(?:gb/?s)?(?:\s*[:@]\s*(?P<ms>[0-9.eE+-]+)\s*(?:ms)?)?$"
)


def parse_kv_link(text: str) -> Fabric:
    """A preset's name, or ``GBS[:MS]`` (``25``, ``25GB/s:0.5``): GB/s per GPU a direction
    and milliseconds per transfer. Errors name the presets and the form."""
    name = text.strip().lower()
    if name in FABRICS:
        return FABRICS[name]
    match = _CUSTOM.match(name)
    if match is None:
        raise SchedkitError(
            f"kv_link: {unknown('link', text, FABRICS)}; or give GB/s per GPU and, after a"
            " colon, milliseconds per transfer (e.g. kv_link=25:0.6)"
        )
    try:
        gbs = float(match["gbs"])
        ms = float(match["ms"]) if match["ms"] else _MEASURED_MS
    except ValueError:
        raise SchedkitError(f"kv_link {text!r}: not a number; write e.g. kv_link=25:0.6") from None
    if not gbs > 0 or gbs == float("inf"):
        raise SchedkitError(
            f"kv_link {text!r}: a link needs a bandwidth above 0 GB/s (a preset such as"
            f" {', '.join(FABRICS)}, or e.g. kv_link=25:0.6)"
        )
    if not 0 <= ms < float("inf"):
        raise SchedkitError(f"kv_link {text!r}: the latency must be 0 ms or more")
    return Fabric(gbs, ms, "given")


class KVLinks:
    """Every prefill instance's egress and decode instance's ingress, FIFO each."""

    __slots__ = ("_byte_s", "_latency", "egress", "ingress", "lanes")

    def __init__(self, fabric: Fabric, prefill_tp: int, decode_tp: int, prefill: int, decode: int):
        self.lanes = min(prefill_tp, decode_tp)
        self._byte_s = 1.0 / (fabric.gbs * 1e9 * self.lanes)
        self._latency = fabric.latency_ms / 1e3
        self.egress = [0.0] * prefill  # when each prefill instance's link is next free
        self.ingress = [0.0] * decode

    def book(self, source: int, target: int, nbytes: int, now: float) -> tuple[float, float]:
        """A transfer of ``nbytes`` asked for at ``now``: when it starts and when it lands."""
        start = max(now, self.egress[source], self.ingress[target])
        end = start + nbytes * self._byte_s
        self.egress[source] = self.ingress[target] = end
        return start, end + self._latency

    def seconds(self, nbytes: int) -> float:
        """A transfer's time on an idle link, its fixed cost included."""
        return nbytes * self._byte_s + self._latency
