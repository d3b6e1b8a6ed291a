"""A real vLLM V1 scheduler with no model and no workers (vLLM's own scheduler-test recipe).

The twin engine, the tests and the overhead benchmark drive vLLM's scheduler and KV cache
manager this way: one attention layer's worth of KV spec, blocks counted, nothing computed.

Nothing here needs a device, so it runs wherever vLLM imports: on the CPU build, on an
accelerator, and with the official CUDA wheel on a machine without a GPU, where vLLM
cannot infer a device and the config is built for the CPU (``model_less_device``)
instead of asking the user for ``VLLM_TARGET_DEVICE=cpu``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedkit.errors import SchedkitError

if TYPE_CHECKING:
    from schedkit.sim.config import SimConfig
    from schedkit.workload import TraceRequest


_CONFIG_DIRS: dict[int, Path] = {}

TOKEN_ID_LIMIT = 1 << 31
"""Token ids a model-less request may carry: vLLM 0.34 stores them as int32 (its
``TokenBuffer``, an ``array("i")``); earlier releases kept Python ints."""


def model_less_token_id(token: int) -> int:
    """``token`` (any non-negative int, e.g. schedkit's 64-bit trace ids) as an id below
    ``TOKEN_ID_LIMIT``: well mixed (splitmix64), so that a block of ids (16 or more)
    equals another only where the original blocks are equal, and prefix-cache hits
    stay what the trace says."""
    from schedkit.bench.engines.requests import in_vocab

    return in_vocab(token, TOKEN_ID_LIMIT)


def model_runner_output(req_ids: Sequence[str], sampled_token_ids: Sequence[Any]) -> Any:
    """vLLM's ``ModelRunnerOutput`` for a step with no model: ``sampled_token_ids[i]``
    are the tokens ``req_ids[i]`` sampled. vLLM 0.32 and 0.33 also take the
    ``req_id_to_index`` map; 0.34 dropped it and indexes by position in ``req_ids``."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(req_ids)
    if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__:
        return ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=list(sampled_token_ids),
        )
    return ModelRunnerOutput(req_ids=ids, sampled_token_ids=list(sampled_token_ids))


def stub_model_dir(max_model_len: int) -> Path:
    """A directory holding only a tiny Llama ``config.json``: enough for vLLM's
    ``ModelConfig`` when no model runs (the twin). One per length, per process."""
    path = _CONFIG_DIRS.get(max_model_len)
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="schedkit-vllm-twin-"))
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 32000,
            "max_position_embeddings": max_model_len,
            "torch_dtype": "float32",
        }
        (path / "config.json").write_text(json.dumps(config))
        _CONFIG_DIRS[max_model_len] = path
    return path


def model_less_device() -> str:
    """The ``DeviceConfig.device`` of a model-less config: ``"auto"`` (vLLM's default)
    where vLLM detects a platform, ``"cpu"`` where it detects none.

    An accelerator wheel on a host without its accelerator (e.g. the official CUDA wheel
    in a CPU-only CI job) resolves to vLLM's ``UnspecifiedPlatform``, whose empty
    ``device_type`` makes ``DeviceConfig("auto")`` fail with "Failed to infer device
    type". The scheduler and KV cache manager never touch the device, so any concrete
    device will do; ``"cpu"`` is the one every host has. The platform stays unspecified:
    vLLM applies no platform defaults (the CPU platform's forced-off async scheduling
    among them), which is why ``build_scheduler`` sets ``async_scheduling`` itself.
    """
    from vllm.platforms import current_platform

    return "auto" if current_platform.device_type else "cpu"


def build_for(
    config: SimConfig,
    requests: Sequence[TraceRequest],
    *,
    cls: type | None = None,
    schedkit: Mapping[str, Any] | None = None,
) -> Any:
    """``build_scheduler`` with the simulator's engine config, sized for ``requests``:
    the same usable KV capacity (vLLM keeps one block as its null block) and a model
    length that fits the longest request."""
    longest = max((max(1, r.prompt_tokens) + max(1, r.output_tokens) for r in requests), default=1)
    return build_scheduler(
        num_blocks=config.num_blocks + 1,
        block_size=config.block_size,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=max(config.block_size, longest + 1),
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        prefix_caching=config.enable_prefix_caching,
        schedkit=schedkit,
        cls=cls,
        scheduler_options=scheduler_knobs(config),
    )


# vLLM's newer SchedulerConfig fields the simulator models, with the release that added them
NEWER_KNOBS = {
    "prefill_schedule_interval": "0.33",
    "cache_aware_admission_window": "0.34",
    "cache_aware_admission_threshold": "0.34",
}


def scheduler_knobs(config: SimConfig) -> dict[str, Any]:
    """The simulator's settings of vLLM's newer ``SchedulerConfig`` fields that differ
    from their defaults, to build the twin with; a clear error where the installed vLLM
    has no such field."""
    from vllm.config import SchedulerConfig

    fields = type(config).model_fields
    knobs = {k: getattr(config, k) for k in NEWER_KNOBS if getattr(config, k) != fields[k].default}
    known = getattr(SchedulerConfig, "__dataclass_fields__", {})
    missing = [k for k in knobs if k not in known]
    if missing:
        import vllm

        raise SchedkitError(
            f"{missing[0]} needs vLLM {NEWER_KNOBS[missing[0]]} or later; vLLM"
            f" {vllm.__version__} is installed here. Drop it, or run the twin in an"
            " environment with a newer vLLM (make test-vllm034 builds one)"
        )
    return knobs


def build_scheduler(
    *,
    num_blocks: int,
    block_size: int = 16,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    max_model_len: int = 1024,
    long_prefill_token_threshold: int = 0,
    prefix_caching: bool = True,
    policy: str = "fcfs",
    schedkit: Mapping[str, Any] | None = None,
    cls: type | None = None,
    model_dir: Path | None = None,
    scheduler_options: Mapping[str, Any] | None = None,
    kv_transfer: Mapping[str, Any] | None = None,
) -> Any:
    """Build ``cls`` (default ``schedkit_vllm.Scheduler``) over ``num_blocks`` KV blocks.

    ``schedkit`` goes to ``additional_config["schedkit"]``; ``model_dir`` needs only a
    ``config.json`` (a stub one is made when omitted); ``scheduler_options`` are further
    ``SchedulerConfig`` fields (e.g. vLLM 0.34's ``cache_aware_admission_window``);
    ``kv_transfer``, ``KVTransferConfig`` fields, configures a KV connector (its scheduler
    side only). vLLM keeps one block as its null block, so ``num_blocks - 1`` are usable.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.structured_output import StructuredOutputManager

    if cls is None:
        from schedkit_vllm.scheduler import Scheduler

        cls = Scheduler
    vllm_config = _vllm_config(
        model_dir or stub_model_dir(max_model_len),
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        long_prefill_token_threshold=long_prefill_token_threshold,
        prefix_caching=prefix_caching,
        policy=policy,
        async_scheduling=issubclass(cls, AsyncScheduler),
        schedkit=schedkit,
        scheduler_options=scheduler_options or {},
        kv_transfer=kv_transfer,
    )
    kv_cache_config = _kv_cache_config(num_blocks, block_size)
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=block_size,
        log_stats=True,
    )


def _vllm_config(
    model_dir: Path,
    *,
    block_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    long_prefill_token_threshold: int,
    prefix_caching: bool,
    policy: str,
    async_scheduling: bool,
    schedkit: Mapping[str, Any] | None,
    scheduler_options: Mapping[str, Any],
    kv_transfer: Mapping[str, Any] | None,
) -> Any:
    """The ``VllmConfig`` of a model-less scheduler (``build_scheduler``'s arguments)."""
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        KVTransferConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )

    model_config = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        dtype="float32",
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        enable_chunked_prefill=True,
        long_prefill_token_threshold=long_prefill_token_threshold,
        policy=policy,
        async_scheduling=async_scheduling,
        **scheduler_options,
    )
    return VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching),
        device_config=DeviceConfig(device=model_less_device()),
        additional_config={"schedkit": dict(schedkit)} if schedkit is not None else {},
        kv_transfer_config=KVTransferConfig(**kv_transfer) if kv_transfer is not None else None,
    )


def _kv_cache_config(num_blocks: int, block_size: int) -> Any:
    """One attention layer's worth of KV spec over ``num_blocks`` blocks: blocks are
    counted, nothing is stored."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
    )
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
