"""A bench arm served disaggregated: prefill and decode pools on the simulator.

An arm is disaggregated when it sets ``prefill_replicas`` and ``decode_replicas`` (flags
``--prefill-replicas``/``--decode-replicas``, or keys of ``--arm``). Each pool takes the
arm's engine settings, with its own TP and GPU where ``prefill_tp``/``decode_tp`` and
``prefill_gpu``/``decode_gpu`` say; ``kv_link`` names the link between them
(``schedkit.sim.kvlink``). The arm's policy routes (``route_request``, asked once per
pool) and runs on every instance, unless the arm names a ``prefill_policy`` or a
``decode_policy`` for one pool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from schedkit.bench.progress import per_replica, simulating
from schedkit.config import SchedkitConfig
from schedkit.errors import SchedkitError
from schedkit.facade import PolicyFacade
from schedkit.records import RunResult
from schedkit.sim.config import SimConfig
from schedkit.sim.cost.calibration import StepCostModel
from schedkit.sim.cost.profiles import GPUProfile, kv_capacity_tokens, tp_degrees
from schedkit.sim.cost.shape import ModelProfile
from schedkit.sim.disagg import DisaggCluster, Pool
from schedkit.sim.kvlink import Fabric, parse_kv_link
from schedkit.workload import TraceRequest

__all__ = ["Disaggregation", "PoolSetup", "disaggregation", "is_disaggregated", "simulate_disagg"]

TTFT_DEFINITION = (
    "vLLM's disaggregated proxy: arrival to the decode instance's first token (SGLang's"
    " router streams the prefill's token once decode has it, one decode step earlier)"
)


@dataclass(frozen=True)
class PoolSetup:
    """One pool: its instances, each instance's GPU and TP, step cost and engine config."""

    replicas: int
    gpu: str
    tp: int
    cost: StepCostModel
    config: SimConfig

    def describe(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "gpu": self.gpu,
            "tp": self.tp,
            "kv_blocks": self.config.num_blocks,
            "cost_model": self.cost.describe(),
        }


@dataclass(frozen=True)
class Disaggregation:
    """A disaggregated arm's deployment."""

    prefill: PoolSetup
    decode: PoolSetup
    link_name: str
    link: Fabric
    kv_bytes_per_token: int

    @property
    def gpus(self) -> int:
        return self.prefill.replicas * self.prefill.tp + self.decode.replicas * self.decode.tp

    def describe(self) -> dict[str, Any]:
        """What results.json records of it."""
        return {
            "prefill": self.prefill.describe(),
            "decode": self.decode.describe(),
            "gpus": self.gpus,
            "kv_link": {
                "name": self.link_name,
                "gbs_per_gpu": self.link.gbs,
                "latency_ms": self.link.latency_ms,
                "source": self.link.source,
            },
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "ttft": TTFT_DEFINITION,
        }


def is_disaggregated(s: dict[str, Any]) -> bool:
    return bool(s["prefill_replicas"] or s["decode_replicas"])


# (settings, where) -> the step cost, model and GPU; (settings, blocks) -> engine config
CostFn = Callable[[dict[str, Any], str], tuple[StepCostModel, ModelProfile, GPUProfile]]
ConfigFn = Callable[[dict[str, Any], int], SimConfig]


def disaggregation(
    s: dict[str, Any], where: str, longest: int, model: ModelProfile, cost: CostFn, config: ConfigFn
) -> Disaggregation:
    """The deployment of ``model`` the settings ``s`` describe; a :class:`SchedkitError`
    naming the arm (``where``), the key and the valid values for any that cannot serve."""
    for key in ("prefill_replicas", "decode_replicas"):
        if not s[key]:
            raise SchedkitError(
                f"{where}{key}=0: a disaggregated deployment needs at least one instance in"
                " each pool; set prefill_replicas and decode_replicas to 1 or more (or neither,"
                " for aggregated serving)"
            )
    if s["replicas"] != 1:
        raise SchedkitError(
            f"{where}replicas={s['replicas']} counts aggregated replicas; a disaggregated arm"
            " sizes its pools with prefill_replicas and decode_replicas: drop replicas"
        )
    if s["kv_offloading_size"]:
        raise SchedkitError(
            f"{where}kv_offloading_size: the simulator's disaggregated instances have no host"
            " KV tier; drop kv_offloading_size, or serve aggregated"
        )
    try:
        fabric = parse_kv_link(s["kv_link"])
    except SchedkitError as exc:
        raise SchedkitError(f"{where}{exc}") from None
    pools = {}
    for side in ("prefill", "decode"):
        gpu_name = s[f"{side}_gpu"] or s["gpu"]
        tp = s[f"{side}_tp"] or s["tp"]
        check_pool_tp(model, tp, f"{side}_tp" if s[f"{side}_tp"] else "tp", where)
        sized = {**s, "gpu": gpu_name, "tp": tp}
        step, model, gpu = cost(sized, f"{where}{side} pool ({side}_gpu={gpu_name}): ")
        blocks = s["kv_blocks"] or (
            kv_capacity_tokens(model, gpu, tp, s["gpu_memory_utilization"]) // s["block_size"]
        )
        # a decode instance holds a whole request; a prefill one, its prompt and a token
        need = longest if side == "decode" else 0
        if blocks * s["block_size"] < max(need, s["block_size"]):
            raise SchedkitError(
                f"{where}the {side} pool's KV cache of {blocks:,} blocks"
                f" ({blocks * s['block_size']:,} tokens on {gpu.name} x tp={tp}) cannot hold"
                f" the longest request ({need:,} tokens), which could never be served there;"
                f" raise {side}_tp, choose a {side}_gpu with more memory, or raise kv_blocks or"
                " gpu_memory_utilization"
            )
        pools[side] = PoolSetup(s[f"{side}_replicas"], gpu.name, tp, step, config(sized, blocks))
    return Disaggregation(
        pools["prefill"], pools["decode"], s["kv_link"], fabric, model.kv_bytes_per_token
    )


def check_pool_tp(model: ModelProfile, tp: int, key: str, where: str) -> None:
    """``{key}={tp}`` must split ``model`` across GPUs."""
    degrees = tp_degrees(model)
    if tp not in degrees:
        raise SchedkitError(
            f"{where}{key}={tp} cannot split {model.name} across GPUs; valid values:"
            f" {', '.join(map(str, degrees))}"
        )


def simulate_disagg(
    requests: Sequence[TraceRequest],
    d: Disaggregation,
    config: SchedkitConfig,
    prefill_config: SchedkitConfig | None = None,
    decode_config: SchedkitConfig | None = None,
) -> RunResult:
    """One replay on the deployment ``d``: ``config``'s policies route and run on every
    instance, but where ``prefill_config`` or ``decode_config`` replace them in a pool."""
    pcfg, dcfg = prefill_config or config, decode_config or config
    prefill = Pool(
        [PolicyFacade.from_config(pcfg) for _ in range(d.prefill.replicas)],
        d.prefill.cost,
        d.prefill.config,
        d.prefill.tp,
    )
    decode = Pool(
        [PolicyFacade.from_config(dcfg) for _ in range(d.decode.replicas)],
        d.decode.cost,
        d.decode.config,
        d.decode.tp,
    )
    router = PolicyFacade.from_config(config)
    with simulating(requests) as on_sample:
        cluster = DisaggCluster(requests, prefill, decode, d.link, d.kv_bytes_per_token, router)
        if on_sample is not None:
            engines = cluster.engines
            for engine, hook in zip(engines, per_replica(on_sample, len(engines)), strict=True):
                engine.recorder.on_sample = hook
        return cluster.run()
