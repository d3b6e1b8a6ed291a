"""``schedkit serve sim``'s arguments, and the simulated engine they describe.

The engine settings are the bench's (``schedkit bench --help``: the same names, which are
vLLM's where it has one, and the same defaults and checks, ``EngineSpec``); the server's
own are vLLM's (``--host``, ``--port``, ``--served-model-name``, ``--max-model-len``) and
``--max-lag-ms``, how late a step may start before it counts as late.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, NoReturn

from pydantic import ValidationError

from schedkit.bench.runner import engine_cost, host_tier, sim_config_of
from schedkit.bench.settings import EngineSpec
from schedkit.errors import SchedkitError
from schedkit.sim.config import SimConfig, StepCost
from schedkit.sim.cost.profiles import kv_capacity_tokens

__all__ = ["Built", "ServeSimArgs", "build_engine", "parse_args"]

DEFAULT_PORT = 8000  # vLLM's
DEFAULT_MAX_MODEL_LEN = 8192

# flag -> EngineSpec field, for the engine settings given as flags
_SETTINGS = {
    "model": str, "gpu": str, "tp": int, "profile": str, "max_num_seqs": int,
    "max_num_batched_tokens": int, "gpu_memory_utilization": float, "block_size": int,
    "kv_blocks": int, "long_prefill_token_threshold": int, "prefill_schedule_interval": int,
    "kv_cache_dtype": str,
}  # fmt: skip


@dataclass(frozen=True)
class ServeSimArgs:
    """The server's settings and the engine settings (``EngineSpec``'s keys)."""

    host: str
    port: int
    served_model_name: str
    max_model_len: int
    max_lag_ms: float
    settings: dict[str, Any]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SchedkitError(
            f"schedkit serve sim: {message} (schedkit serve sim -- --help lists them)"
        )


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="schedkit serve sim --policy P --", description="A simulated replica.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--served-model-name", default=None, help="default: --model")
    p.add_argument("--max-model-len", type=int, default=None,
                   help=f"prompt + output tokens a request may have (default {DEFAULT_MAX_MODEL_LEN}"
                   " or the KV cache, the smaller)")  # fmt: skip
    p.add_argument("--max-lag-ms", type=float, default=50.0,
                   help="a step starting later than this is counted late and warned of once")  # fmt: skip
    for name, kind in _SETTINGS.items():
        flag = "--" + name.replace("_", "-")
        aliases = {"tp": ["--tensor-parallel-size"], "kv_blocks": ["--num-gpu-blocks-override"]}
        p.add_argument(flag, *aliases.get(name, []), dest=name, type=kind, default=None,
                       help=str(EngineSpec.model_fields[name].description or ""))  # fmt: skip
    p.add_argument("--no-enable-prefix-caching", dest="prefix_caching", action="store_false",
                   default=None)  # fmt: skip
    p.add_argument("--no-async-scheduling", dest="async_scheduling", action="store_false",
                   default=None)  # fmt: skip
    return p


def parse_args(argv: list[str]) -> ServeSimArgs:
    """``argv`` read, checked as the bench checks its engine settings."""
    ns = _parser().parse_args(argv)
    given = {k: v for k, v in vars(ns).items() if k in EngineSpec.model_fields and v is not None}
    try:
        settings = EngineSpec(**given).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-")
        raise SchedkitError(f"schedkit serve sim: {flag}: {err['msg']}") from None
    for name, value in (("--port", ns.port), ("--max-model-len", ns.max_model_len)):
        if value is not None and not 0 < value < (65536 if name == "--port" else 1 << 31):
            raise SchedkitError(
                f"schedkit serve sim: {name} must be a positive number, got {value}"
            )
    if not ns.max_lag_ms > 0:
        raise SchedkitError(f"schedkit serve sim: --max-lag-ms must be > 0, got {ns.max_lag_ms}")
    return ServeSimArgs(
        host=ns.host,
        port=ns.port,
        served_model_name=ns.served_model_name or settings["model"],
        max_model_len=ns.max_model_len or 0,  # 0: from the KV cache (build_engine)
        max_lag_ms=ns.max_lag_ms,
        settings=settings,
    )


@dataclass(frozen=True)
class Built:
    """The simulated engine of a server: its cost model and config, what it simulates,
    and the context it serves (``--max-model-len``, else the smaller of 8192 tokens and
    the KV cache)."""

    cost: StepCost
    config: SimConfig
    description: str
    max_model_len: int


def build_engine(args: ServeSimArgs) -> Built:
    """The engine ``args``' settings describe (``SchedkitError`` when they cannot be)."""
    s = args.settings
    cost, model, gpu = engine_cost(s, "schedkit serve sim: ")
    blocks = s["kv_blocks"] or (
        kv_capacity_tokens(model, gpu, s["tp"], s["gpu_memory_utilization"]) // s["block_size"]
    )
    if blocks < 1:
        raise SchedkitError(
            f"schedkit serve sim: the KV cache of {model.name} on {gpu.name} x tp={s['tp']} holds"
            f" no block of {s['block_size']} tokens; lower --block-size or set --kv-blocks"
        )
    try:
        config = sim_config_of(s, blocks, host_tier(s, model), hash_block_tokens=s["block_size"])
    except ValidationError as exc:
        why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise SchedkitError(
            f"schedkit serve sim: these engine settings do not go together: {why}"
        ) from None
    capacity = blocks * s["block_size"]
    if args.max_model_len > capacity:
        raise SchedkitError(
            f"schedkit serve sim: --max-model-len {args.max_model_len} is more than the KV cache"
            f" holds ({capacity:,} tokens); lower it or raise --kv-blocks"
        )
    timing = cost.describe().get("kind", type(cost).__name__)
    what = (
        f"simulated {model.label} on {gpu.name} x tp={s['tp']}, steps timed by the {timing} model"
    )
    return Built(cost, config, what, args.max_model_len or min(DEFAULT_MAX_MODEL_LEN, capacity))
