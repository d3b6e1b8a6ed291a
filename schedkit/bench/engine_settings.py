"""Bench settings an engine would not honour: refused before it runs, never silently dropped.

``schedkit bench`` records every setting in results.json, so a setting the engine does not
receive would be reported as measured when it was not (``--engine vllm --tp 3`` ran on one
GPU). The engines the adapters ship pass on what ``adapters/*/schedkit_*/harness/real.py`` and
``twin.py`` show; the simulator honours every setting. An engine not listed here (a third
party's) is trusted with all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedkit.errors import SchedkitError

if TYPE_CHECKING:
    from schedkit.bench.spec import BenchSpec

__all__ = ["IGNORED_SETTINGS", "check_engine_settings"]

_ONE_ENGINE = "it runs one in-process engine on one device"
_WALL_CLOCK = "it is timed by the wall clock on this machine, not by a GPU profile"
_OWN_EVICTION = "the adapter's eviction hook keeps its own window of 4,096 blocks"
_RUNNING = "the servers run with the settings they were launched with"
_MEASURED = "the results were measured elsewhere, with the settings used there"
_KV_DTYPE = "the in-process engine is started with its default KV cache dtype"
_CADENCE = ("prefill_schedule_interval", "cache_aware_admission_window",
            "cache_aware_admission_threshold")  # fmt: skip
_NO_KNOB_032 = "vLLM 0.32 (the CPU build the real engine runs) has no such setting"
_OFFLOAD = ("kv_offloading_size", "kv_offloading_bandwidth", "kv_offloading_latency_ms")
_NO_OFFLOAD = "the in-process engine runs without KV offloading (a CPU build has no host tier)"
_NO_OFFLOAD_TWIN = "the twin's scheduler runs without a KV connector"
_NO_OFFLOAD_SGLANG = "SGLang's host tier is HiCache, which the simulator does not model"
_NO_KNOB_SGLANG = "it is vLLM's; SGLang schedules prefill by its own rules"
_ASYNC = "async_scheduling"
DISAGG_KEYS = ("prefill_replicas", "decode_replicas", "prefill_tp", "decode_tp",
               "prefill_gpu", "decode_gpu", "kv_link")  # fmt: skip
_DISAGG = "disaggregated serving runs on the simulator"
_OWN_SCHEDULE = (
    "the engine batches prefills by its own rules (vLLM mixes them into decode steps,"
    " SGLang runs prefill-only steps first); --no-mixed-prefill makes the simulator do as"
    " SGLang does"
)

#: engine -> BenchSpec field -> why that engine does not honour it
IGNORED_SETTINGS: dict[str, dict[str, str]] = {
    "vllm": {
        "tp": _ONE_ENGINE,
        "replicas": _ONE_ENGINE,
        "gpu": _WALL_CLOCK,
        "profile": _WALL_CLOCK,
        "eviction_window": _OWN_EVICTION,
        "kv_cache_dtype": _KV_DTYPE,
        "mixed_prefill": _OWN_SCHEDULE,
        **dict.fromkeys(_CADENCE, _NO_KNOB_032),
        **dict.fromkeys(_OFFLOAD, _NO_OFFLOAD),
        _ASYNC: _WALL_CLOCK,
        **dict.fromkeys(DISAGG_KEYS, _DISAGG),
    },
    "sglang": {
        "tp": _ONE_ENGINE,
        "replicas": _ONE_ENGINE,
        "gpu": _WALL_CLOCK,
        "profile": _WALL_CLOCK,
        "gpu_memory_utilization": "SGLang sizes its pools with its own mem_fraction_static",
        "eviction_window": "SGLang's radix cache evicts by its own rules",
        "kv_cache_dtype": _KV_DTYPE,
        "mixed_prefill": _OWN_SCHEDULE,
        **dict.fromkeys(_CADENCE, _NO_KNOB_SGLANG),
        **dict.fromkeys(_OFFLOAD, _NO_OFFLOAD_SGLANG),
        _ASYNC: _WALL_CLOCK,
        **dict.fromkeys(DISAGG_KEYS, _DISAGG),
    },
    "vllm-twin": {
        "eviction_window": _OWN_EVICTION,
        "replicas": _ONE_ENGINE,
        "mixed_prefill": _OWN_SCHEDULE,
        **dict.fromkeys(_OFFLOAD, _NO_OFFLOAD_TWIN),
        **dict.fromkeys(DISAGG_KEYS, _DISAGG),
    },
    "openai": {
        "tp": _RUNNING,
        "replicas": _RUNNING,
        "gpu": _WALL_CLOCK,
        "profile": _WALL_CLOCK,
        "max_num_seqs": _RUNNING,
        "max_num_batched_tokens": _RUNNING,
        "gpu_memory_utilization": _RUNNING,
        "long_prefill_token_threshold": _RUNNING,
        "prefix_caching": _RUNNING,
        "kv_blocks": _RUNNING,
        "eviction_window": _RUNNING,
        "kv_cache_dtype": _RUNNING,
        "mixed_prefill": _RUNNING,
        **dict.fromkeys(_CADENCE, _RUNNING),
        **dict.fromkeys(_OFFLOAD, _RUNNING),
        _ASYNC: _RUNNING,
        **dict.fromkeys(DISAGG_KEYS, _RUNNING),
    },
    "import": {
        "tp": _MEASURED,
        "replicas": _MEASURED,
        "gpu": _WALL_CLOCK,
        "profile": _WALL_CLOCK,
        "max_num_seqs": _MEASURED,
        "max_num_batched_tokens": _MEASURED,
        "gpu_memory_utilization": _MEASURED,
        "long_prefill_token_threshold": _MEASURED,
        "prefix_caching": _MEASURED,
        "kv_blocks": _MEASURED,
        "eviction_window": _MEASURED,
        "kv_cache_dtype": _MEASURED,
        "mixed_prefill": _MEASURED,
        **dict.fromkeys(_CADENCE, _MEASURED),
        **dict.fromkeys(_OFFLOAD, _MEASURED),
        _ASYNC: _MEASURED,
        **dict.fromkeys(DISAGG_KEYS, _MEASURED),
    },
}


# fields whose flag is vLLM's name, not the field's
_FLAGS = {
    "tp": "--tensor-parallel-size",
    "kv_blocks": "--num-gpu-blocks-override",
    "prefix_caching": "--no-enable-prefix-caching",
    "mixed_prefill": "--[no-]mixed-prefill",
    "async_scheduling": "--[no-]async-scheduling",
}


def _flag(field: str) -> str:
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def check_engine_settings(spec: BenchSpec) -> None:
    """Raise :class:`SchedkitError` naming every setting of ``spec`` that differs from
    its default and that ``spec.engine`` would not pass to the engine."""
    ignored = IGNORED_SETTINGS.get(spec.engine, {})
    settings = spec.settings
    fields = type(settings).model_fields
    refused = [
        f"{_flag(name)} {getattr(settings, name)} ({why})"
        for name, why in ignored.items()
        if getattr(settings, name) != fields[name].default
    ]
    if not refused:
        return
    flags = ", ".join(_flag(name) for name in ignored)
    raise SchedkitError(
        f"--engine {spec.engine} does not pass these settings to the engine, so results.json"
        f" would record settings the run did not use: {'; '.join(refused)}. Drop them (the"
        f" engine ignores {flags}), or use --engine sim, which honours every setting"
    )
