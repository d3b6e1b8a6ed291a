"""What each arm ran on: its engine settings, and those that differ between arms.

An arm that sets engine settings (``--arm name=seqs64,max_num_seqs=64``, a config file's
``[engine]`` table) runs on its own engine, results.json's ``arms[].engine``; the others
on the bench's, ``engine``. Every output says what ran from here: the report's first
screen and the command's summary show the settings that differ between arms side by
side, and the report's Engine table shows every setting per arm, the differing ones
first and marked. A setting an arm asks for that the engine entry records only by its
effect (``gpu_memory_utilization``, recorded as the ``num_blocks`` it gave) is shown as
asked, with the bench's value for the arms that leave it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schedkit.bench.results import Results

__all__ = ["EngineRow", "arm_engines", "differing", "engine_context", "engine_rows"]

#: a setting an arm asks for -> the engine entry's key that records it
RECORDED_AS = {"prefix_caching": "enable_prefix_caching", "kv_blocks": "num_blocks"}
#: what the context line names of the engine, in its order
_CONTEXT_KEYS = ("engine", "model", "gpu", "tp")


@dataclass(frozen=True)
class EngineRow:
    """One engine setting: its value under each arm (None: not recorded for that arm)."""

    key: str
    values: list[Any]
    differs: bool


def _asked(results: Results) -> list[str]:
    """The settings some arm sets itself, in the order the arms give them."""
    return list(dict.fromkeys(key for arm in results.arms for key in arm.engine_settings))


def arm_engines(results: Results) -> list[tuple[str, dict[str, Any]]]:
    """Each arm's label and the engine it ran on: its engine entry (the bench's for an arm
    that sets nothing), with the settings some arm asked for that the entry records only
    by their effect (the arm's value, else the bench's: ``provenance.spec.settings``)."""
    bench = results.provenance.spec.get("settings")
    defaults: Mapping[str, Any] = bench if isinstance(bench, Mapping) else {}
    asked = _asked(results)
    out = []
    for arm in results.arms:
        engine = _flat(dict(results.arm_engine(arm)))
        for key in asked:
            if RECORDED_AS.get(key, key) not in engine:
                engine[key] = arm.engine_settings.get(key, defaults.get(key))
        out.append((arm.policy, engine))
    return out


def _flat(engine: dict[str, Any]) -> dict[str, Any]:
    """A disaggregated arm's engine entry with its deployment in a few readable rows."""
    d = engine.pop("disaggregated", None)
    if not isinstance(d, Mapping):
        return engine
    engine.pop("replicas", None)
    pools = {side: d[side] for side in ("prefill", "decode")}

    def pool(side: str) -> str:
        p = pools[side]
        return f"{p['replicas']} {side} ({p['gpu']}, tp {p['tp']}, {p['kv_blocks']:,} blocks)"

    engine["deployment"] = f"{pool('prefill')} + {pool('decode')}: {d['gpus']} GPUs"
    link = d["kv_link"]
    engine["kv_link"] = (
        f"{link['name']}: {link['gbs_per_gpu']:g} GB/s per GPU, {link['latency_ms']:g} ms a"
        f" transfer ({link['source']})"
    )
    costs = [pools[side]["cost_model"] for side in pools]
    if costs[0] == costs[1]:
        engine["cost_model"] = costs[0]
    else:
        for side, cost in zip(pools, costs, strict=True):
            engine[f"{side} cost_model"] = cost
    engine["TTFT"] = d["ttft"]
    return engine


def engine_rows(results: Results) -> list[EngineRow]:
    """Every engine setting of every arm, those that differ between arms first (the ones
    the arms set themselves leading), each in results.json's order otherwise."""
    engines = [engine for _, engine in arm_engines(results)]
    present = dict.fromkeys(key for engine in engines for key in engine)
    asked = [RECORDED_AS.get(key, key) for key in _asked(results)]
    keys = [key for key in dict.fromkeys([*asked, *present]) if key in present]
    rows = []
    for key in keys:
        values = [engine.get(key) for engine in engines]
        rows.append(EngineRow(key, values, any(v != values[0] for v in values[1:])))
    return sorted(rows, key=lambda row: not row.differs)


def differing(results: Results) -> list[EngineRow]:
    """The engine settings whose values differ between arms (none with one arm)."""
    return [row for row in engine_rows(results) if row.differs]


def engine_context(results: Results) -> str:
    """``sim: Qwen2.5-14B on H100-SXM, tp 2``: what every arm ran on. A part the arms
    differ in is said to be per arm (the differing settings show each arm's)."""
    engines = [engine for _, engine in arm_engines(results)] or [results.engine]
    common: dict[str, Any] = {}
    apart = []
    for key in _CONTEXT_KEYS:
        values = [engine.get(key) for engine in engines]
        if any(v != values[0] for v in values[1:]):
            apart.append(key)
        elif values[0]:
            common[key] = values[0]
    where = " on ".join(str(common[k]) for k in ("model", "gpu") if k in common)
    tp = common.get("tp")
    if isinstance(tp, int) and tp > 1:
        where += f", tp {tp}"
    if apart:
        where += ("; " if where else "") + f"{', '.join(apart)} per arm"
    name = str(common.get("engine", "engine"))
    return f"{name}: {where}" if where else name
