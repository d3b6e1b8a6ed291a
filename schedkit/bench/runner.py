"""The A/B runner: one request stream, several policies, side-by-side results."""

from __future__ import annotations

import copy
import dataclasses
import logging
import multiprocessing as mp
import os
import re
from collections.abc import Sequence
from concurrent.futures import as_completed
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schedkit.adapter.recording import RECORDING_ENGINES
from schedkit.bench.arms import ENGINE_KEYS, ResolvedArm, resolve_arms
from schedkit.bench.disagg import Disaggregation, disaggregation, is_disaggregated
from schedkit.bench.engine_settings import check_engine_settings
from schedkit.bench.engines.sim import run_on_sim, simulate, trusted_requests
from schedkit.bench.output import check_out_dir, check_replacing, provenance, write_outputs
from schedkit.bench.progress import Tracker, tracking
from schedkit.bench.results import SCHEMA_VERSION, Results
from schedkit.bench.settings import EngineSpec
from schedkit.bench.spec import ArmRunner, BenchSpec
from schedkit.bench.stats.compare import (
    METRIC_KEYS,
    check_metrics,
    compare_arms,
)
from schedkit.bench.stats.flags import run_flags
from schedkit.bench.stats.metrics import compute_metrics
from schedkit.bench.stats.request_table import RequestTable
from schedkit.bench.workers import fork_pool
from schedkit.capabilities import matrix_engine, warn_unsupported
from schedkit.config import SchedkitConfig
from schedkit.errors import SchedkitError, quote
from schedkit.facade import PolicyFacade
from schedkit.records import RunResult
from schedkit.sim.config import DEFAULT_EVICTION_WINDOW, SimConfig
from schedkit.sim.cost.calibration import (
    StepCostModel,
    default_cost_model,
    make_cost_model,
    profile_mismatch,
)
from schedkit.sim.cost.model import LinearCostModel
from schedkit.sim.cost.operators import OperatorCostModel
from schedkit.sim.cost.profiles import (
    DEFAULT_REGISTRY,
    KV_CACHE_DTYPES,
    GPUProfile,
    kv_capacity_tokens,
    register_model_dir,
)
from schedkit.sim.cost.shape import ModelProfile
from schedkit.workload import TraceRequest, Workload, load_workload

__all__ = [
    "Bench",
    "BenchSpec",
    "arrival_rate",
    "engine_cost",
    "engines",
    "load_engine",
    "run_arms",
    "run_bench",
    "run_on_sim",
    "sim_config_of",
    "simulate",
    "truncation_flag",
    "trusted_requests",
]

log = logging.getLogger("schedkit")
ENGINE_GROUP = "schedkit.engines"  # entry points: engine name -> ArmRunner
# An arm's engine: what results.json records of it, its cost model, the simulator config.
# A disaggregated arm's own deployment too (its prefill pool's cost and config above).
ArmEngine = tuple[dict[str, Any], StepCostModel, SimConfig, Disaggregation | None]
# Settings that size the KV cache (named when an arm's cache cannot hold a request).
CAPACITY_KEYS = ("kv_blocks", "gpu_memory_utilization", "block_size", "model", "gpu", "tp")


def _check_targets(spec: BenchSpec, arms: int) -> None:
    """``--target`` and the live client's limits go with ``--engine openai`` only, one
    target per arm (``--engine import``: one result file per arm)."""
    if spec.engine == "import":
        _check_import_targets(spec, arms)
    elif spec.engine != "openai":
        _check_no_live_flags(spec)
    elif not spec.live.targets:
        raise SchedkitError(
            "--engine openai replays against running servers: give --target URL per arm"
            " (e.g. --target http://127.0.0.1:8000)"
        )
    else:
        _check_live_targets(spec, arms)


CLOSED_LOOP_ENGINES = ("sim", "openai")  # engines that honour --max-concurrency


def _check_load_modes(spec: BenchSpec, arms: Sequence[ResolvedArm]) -> None:
    """``--max-concurrency`` where the engine keeps it: the simulator with one replica
    (the requests in flight are counted by the one engine) and live servers; ``--request-rate
    inf`` is no rate to search a goodput from."""
    if spec.workload.max_concurrency is not None:
        if spec.engine not in CLOSED_LOOP_ENGINES:
            raise SchedkitError(
                f"--max-concurrency is kept by --engine sim and --engine openai; --engine"
                f" {spec.engine} replays requests at their arrival times. Drop"
                " --max-concurrency, or serve the engine and use --engine openai"
            )
        replicas = max(a.overrides.get("replicas", spec.settings.replicas) for a in arms)
        if spec.engine == "sim" and replicas > 1:
            raise SchedkitError(
                f"--max-concurrency with --replicas {replicas}: the simulator keeps a client's"
                " limit on one replica only; drop one of them"
            )
    if spec.workload.all_at_once and spec.stats.goodput:
        raise SchedkitError(
            "--goodput searches the highest request rate meeting the SLOs, and --request-rate"
            " inf sends every request at once, at no rate; drop one of them (--goodput"
            " ttft:MS tpot:MS reports the requests/s that met them)"
        )


def _check_import_targets(spec: BenchSpec, arms: int) -> None:
    if len(spec.live.targets) != arms:
        raise SchedkitError(
            f"--engine import takes one --target result file per arm: {arms} arm(s),"
            f" {len(spec.live.targets)} file(s)"
        )
    missing = [t for t in spec.live.targets if not Path(t).is_file()]
    if missing:
        raise SchedkitError(
            f"--target {missing[0]!r} is not a file; give aiperf's profile_export.jsonl,"
            " a vllm bench serve result JSON or a guidellm result JSON per arm"
        )


def _check_no_live_flags(spec: BenchSpec) -> None:
    given = [
        flag for flag, value in (
            ("--target", spec.live.targets), ("--max-seconds", spec.live.max_seconds),
            ("--serve-command", spec.live.serve_command),
        ) if value
    ]  # fmt: skip
    if given:
        raise SchedkitError(
            f"{', '.join(given)} drive running servers: add --engine openai (and a"
            f" --target per arm), or drop {' and '.join(given)}"
        )


def _check_live_targets(spec: BenchSpec, arms: int) -> None:
    bad = [t for t in spec.live.targets if not re.match(r"^https?://[^/\s]+", t)]
    if bad:
        raise SchedkitError(
            f"--target {bad[0]!r} is not an http(s) URL; give the server's base URL, like"
            " http://127.0.0.1:8000"
        )
    if spec.live.serve_command is not None:
        _check_serve_command(spec, spec.live.serve_command)
    elif len(spec.live.targets) != arms:
        raise SchedkitError(
            f"--engine openai runs one arm per --target: {arms} arm(s), {len(spec.live.targets)}"
            " target(s). The policies run in the servers (schedkit serve ... --policy X),"
            " so give one --policy (its label) per server, in the same order"
        )


def _check_serve_command(spec: BenchSpec, command: str) -> None:
    from schedkit.bench.engines.launch import POLICY_FIELD

    if len(spec.live.targets) != 1:
        raise SchedkitError(
            f"--serve-command starts each arm's server behind one --target; got"
            f" {len(spec.live.targets)}: give the one URL the command's server listens on"
        )
    if POLICY_FIELD not in command:
        raise SchedkitError(
            f"--serve-command has no {POLICY_FIELD}, so every arm would start the same"
            f" server; write it where the policy goes, e.g. 'schedkit serve vllm --policy"
            f" {POLICY_FIELD} -- --model M --port 8001'"
        )


def _check_overrides(spec: BenchSpec, arms: Sequence[ResolvedArm]) -> None:
    """Each arm's own engine settings, checked as the bench's are: an engine refuses
    those it would not pass on (``engine_settings.IGNORED_SETTINGS``)."""
    for arm in arms:
        if arm.overrides:
            try:
                check_engine_settings(spec.with_settings(arm.overrides))
            except SchedkitError as exc:
                raise SchedkitError(f"arm {arm.label}: {exc}") from None


def _recording(
    spec: BenchSpec, labels: Sequence[str], configs: Sequence[SchedkitConfig]
) -> list[SchedkitConfig]:
    """Each arm's config with its steps file, ``<record_steps>/<label>.csv``."""
    if spec.engine not in RECORDING_ENGINES:
        raise SchedkitError(
            "--record-steps records a real engine's steps for schedkit calibrate (the"
            " simulator's come from its cost model); it is wired for --engine vllm and"
            f" --engine sglang, not --engine {spec.engine}"
        )
    directory = Path(spec.record_steps or ".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SchedkitError(
            f"--record-steps {quote(str(directory))}: cannot create it ({exc.strerror or exc})"
        ) from None
    safe = [re.sub(r"[^A-Za-z0-9._+-]", "_", label) for label in labels]
    return [
        config.model_copy(update={"record_steps": str(directory / f"{name}.csv")})
        for name, config in zip(safe, configs, strict=True)
    ]


def engines() -> dict[str, str]:
    """Engine name -> where it comes from: the built-in simulator plus installed adapters."""
    found = {"sim": "schedkit", "openai": "schedkit", "import": "schedkit"}
    for ep in metadata.entry_points(group=ENGINE_GROUP):
        found.setdefault(ep.name, ep.dist.name if ep.dist else ep.value)
    return found


def load_engine(name: str) -> ArmRunner:
    if name == "sim":
        return run_on_sim
    if name == "openai":
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            raise SchedkitError(
                "--engine openai needs aiohttp: pip install 'schedkit[live]'"
            ) from None
        from schedkit.bench.engines.live import run_live_arm

        return run_live_arm
    if name == "import":
        from schedkit.bench.engines.interop import run_import_arm

        return run_import_arm
    for ep in metadata.entry_points(group=ENGINE_GROUP):
        if ep.name == name:
            try:
                runner: ArmRunner = ep.load()
            except Exception as exc:
                raise SchedkitError(f"cannot load engine {name!r} from {ep.value}: {exc}") from exc
            return runner
    hint = (
        " LMDeploy's engine needs a GPU, so there is no lmdeploy bench engine: start servers"
        " with `schedkit serve lmdeploy` and A/B them with --engine openai."
        if name == "lmdeploy"
        else ""
    )
    raise SchedkitError(
        f"unknown engine {name!r}; installed: {', '.join(engines())}. vllm-twin and vllm come"
        f" with schedkit-vllm (adapters/vllm), sglang with schedkit-sglang.{hint}"
    )


GOODPUT_TARGET = 0.9  # DistServe: the rate at which 90% of requests meet both SLOs


class Bench:
    """Prepared workload, cost model and engine config shared by every arm."""

    def __init__(self, spec: BenchSpec) -> None:
        check_engine_settings(spec)  # before loading it: refused whether installed or not
        self.runner = load_engine(spec.engine)
        self.spec = spec
        self.out_dir: Path | None = None
        check_metrics(spec.stats.verdict_metrics)
        self.flags: list[dict[str, Any]] = []
        base = self._load_workload()
        # Policies see the SLOs the report judges them by: the --slo-* targets become the
        # requests' own wherever the workload gives none (a request's own SLO wins), so every
        # engine passes them to policies as RequestView.slo_ttft_ms / slo_tpot_ms.
        self.base = base.with_default_slos(spec.stats.slo_ttft_ms, spec.stats.slo_tpot_ms)
        self.arms = resolve_arms(spec.policies, spec.arms)
        _check_targets(spec, len(self.arms))
        _check_load_modes(spec, self.arms)
        self.labels = [arm.label for arm in self.arms]
        self.configs = [arm.config for arm in self.arms]
        self.pool_configs = [arm.pool_configs for arm in self.arms]
        if spec.record_steps is not None:
            self.configs = _recording(spec, self.labels, self.configs)
        for label, cfg in zip(self.labels, self.configs, strict=True):
            if cfg.record_steps is not None and spec.engine not in RECORDING_ENGINES:
                raise SchedkitError(
                    f"arm {label}: record_steps is honoured by --engine vllm and --engine"
                    f" sglang only; --engine {spec.engine} would ignore it"
                    " (docs/calibration.md)"
                )
        _check_overrides(spec, self.arms)
        longest = max(r.prompt_tokens + r.output_tokens for r in base.requests)
        self._profile_warnings: list[str] = []
        self.engine_info, self.cost, self.sim_config, self.disagg = self._engine({}, longest, None)
        built: dict[tuple[tuple[str, Any], ...], ArmEngine] = {}
        self.arm_engines: list[ArmEngine] = []
        for arm in self.arms:
            key = tuple(sorted(arm.overrides.items()))
            if key not in built:
                built[key] = self._engine(arm.overrides, longest, arm)
            self.arm_engines.append(built[key])
        self.warnings = self._warnings()

    def _load_workload(self) -> Workload:
        """The request stream every arm replays: the spec's window of the workload, cut
        to ``--max-requests`` (flagged when that kept a quiet start of a busier trace)."""
        spec = self.spec
        # With --max-requests (and no --window), the trace is read no further than the
        # first SCAN_REQUESTS requests (or as many as kept): enough to find a busier stretch
        # to suggest, and a week-long trace costs what its start does.
        cap = None
        if spec.workload.max_requests and spec.workload.window is None:
            cap = max(spec.workload.max_requests, SCAN_REQUESTS)
        base = load_workload(
            spec.workload.name,
            seed=spec.workload.seed,
            max_requests=cap,
            tokenizer=spec.workload.tokenizer,
        )
        if not base.requests:
            raise SchedkitError(f"workload {spec.workload.name!r} has no requests")
        if spec.workload.window is not None:
            base = base.windowed(*spec.workload.window)
        if spec.workload.max_requests and spec.workload.max_requests < len(base.requests):
            full, base = base, base.truncated(spec.workload.max_requests)
            flag = truncation_flag(
                full,
                base,
                spec.workload.max_requests,
                partial=cap == len(full.requests),
                rate_scale=spec.workload.rate_scale,
            )
            if flag is not None and not spec.workload.all_at_once:
                self.flags.append(flag)
        return base.at_once() if spec.workload.all_at_once else base

    def _warnings(self) -> list[str]:
        """Cost profiles that do not match the run, and (the capability matrix's words)
        hooks a policy uses that the engine honours only in part. Unknown policies or bad
        options fail here, before anything runs."""
        warnings = list(dict.fromkeys(self._profile_warnings))
        for cfg, (info, *_) in zip(self.configs, self.arm_engines, strict=True):
            facade = PolicyFacade.from_config(cfg)
            found = warn_unsupported(facade, matrix_engine(self.spec.engine))
            one = info["replicas"] == 1 and "disaggregated" not in info
            if facade.has_route and one and self.spec.engine == "sim":
                found.append(
                    f"schedkit: policy {cfg.label!r} routes requests (route_request), but the"
                    " arm runs one engine; give --replicas N (or replicas=N in --arm)"
                )
            warnings.extend(m for m in found if m not in warnings)
        return warnings

    def _cost(
        self, s: dict[str, Any], where: str
    ) -> tuple[StepCostModel, ModelProfile, GPUProfile]:
        """The step-time model of the engine settings ``s`` (``engine_cost``)."""
        return engine_cost(s, where, served=self.spec.engine == "openai")

    def _engine(
        self, overrides: dict[str, Any], longest: int, arm: ResolvedArm | None
    ) -> ArmEngine:
        """The engine settings with ``overrides``: what results.json records, the cost
        model and the simulator's config. ``arm`` names the arm in errors."""
        spec = self.spec
        s = {**spec.settings.model_dump(include=set(ENGINE_KEYS)), **overrides}
        where = f"--arm {arm.label}: " if arm is not None and overrides else ""
        cost, model, gpu = self._cost(s, where)
        if is_disaggregated(s):
            return self._disaggregated(s, longest, where, model)
        blocks = s["kv_blocks"] or (
            kv_capacity_tokens(model, gpu, s["tp"], s["gpu_memory_utilization"]) // s["block_size"]
        )
        if s["profile"] is not None and isinstance(cost, LinearCostModel):
            found = profile_mismatch(s["profile"], model.name, gpu.name, s["tp"])
            if found:
                log.warning("%s", found)
                self._profile_warnings.append(found)
        self._check_capacity(s, blocks, overrides, longest, where, f"{model.name} on {gpu.name}")
        try:
            sim_config = self._sim_config(s, blocks, host_tier(s, model))
        except ValidationError as exc:  # settings that do not go together
            why = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise SchedkitError(
                f"{where}these engine settings do not go together: {why}. Drop one of them"
                " (--no-mixed-prefill and --no-enable-prefix-caching set these off)"
            ) from None
        info: dict[str, Any] = {
            "engine": spec.engine,
            "model": s["model"] if spec.engine == "openai" else model.label,
            **({"model_profile": model.figures()} if model.source else {}),
            "gpu": gpu.name,
            "tp": s["tp"],
            "replicas": s["replicas"],
            "kv_cache_dtype": s["kv_cache_dtype"],
            "cost_model": cost.describe(),
            **sim_config.model_dump(exclude={"timeline_interval_s", "max_concurrency"}),
        }
        return info, cost, sim_config, None

    def _disaggregated(
        self, s: dict[str, Any], longest: int, where: str, model: ModelProfile
    ) -> ArmEngine:
        """A disaggregated arm's engine (``schedkit.bench.disagg``): what results.json
        records, its prefill pool's cost model and config, and the deployment."""
        d = disaggregation(s, where, longest, model, self._cost, self._sim_config)
        p = d.prefill
        info: dict[str, Any] = {
            "engine": self.spec.engine,
            "model": model.label,
            **({"model_profile": model.figures()} if model.source else {}),
            "gpu": p.gpu,
            "tp": p.tp,
            "replicas": 1,
            "kv_cache_dtype": s["kv_cache_dtype"],
            "disaggregated": d.describe(),
            **p.config.model_dump(exclude={"timeline_interval_s", "max_concurrency", "num_blocks"}),
        }
        return info, p.cost, p.config, d

    def _check_capacity(
        self,
        s: dict[str, Any],
        blocks: int,
        overrides: dict[str, Any],
        longest: int,
        where: str,
        deployment: str,
    ) -> None:
        """A KV cache of ``blocks`` blocks must hold one and, for an arm's own settings,
        the longest request."""
        if blocks < 1:
            raise SchedkitError(
                f"{where}--block-size {s['block_size']} is larger than the whole KV cache of"
                f" {deployment} x tp={s['tp']}; use a block size such as 16"
                " (vLLM's default), or set the capacity with --kv-blocks"
            )
        if overrides and blocks * s["block_size"] < longest:
            keys = [k for k in CAPACITY_KEYS if k in overrides]
            raise SchedkitError(
                f"{where}{', '.join(f'{k}={overrides[k]}' for k in keys) or 'its settings'}"
                f" give a KV cache of {blocks:,} blocks ({blocks * s['block_size']:,} tokens),"
                f" below the longest request of {self.base.name} ({longest:,} tokens), which"
                " the engine could never run; raise kv_blocks or gpu_memory_utilization"
            )

    def _sim_config(
        self, s: dict[str, Any], blocks: int, host: dict[str, Any] | None = None
    ) -> SimConfig:
        """The simulator's config for engine settings ``s`` (``sim_config_of``)."""
        mixed = self.spec.settings.mixed_prefill
        return sim_config_of(
            s,
            blocks,
            host,
            mixed_prefill=self.spec.engine != "sglang" if mixed is None else mixed,
            hash_block_tokens=self.base.hash_block_tokens,
            max_concurrency=self.spec.workload.max_concurrency,
        )

    def workload(self, rate_scale: float) -> Workload:
        return self.base.scaled(rate_scale) if rate_scale != 1.0 else self.base

    def run_arm(self, index: int, rate_scale: float) -> RunResult:
        return self.runner(self.for_arm(index), index, rate_scale)

    def for_arm(self, index: int) -> Bench:
        """The bench as arm ``index`` runs it: ``spec``, ``sim_config``, ``cost`` and
        ``engine_info`` with the arm's own engine settings (itself for an arm with none),
        so an engine's runner needs to know nothing of arms."""
        overrides = self.arms[index].overrides
        if not overrides:
            return self
        arm = copy.copy(self)
        arm.spec = self.spec.with_settings(overrides)
        arm.engine_info, arm.cost, arm.sim_config, arm.disagg = self.arm_engines[index]
        return arm

    def metrics(self, run: RunResult) -> dict[str, Any]:
        stats = self.spec.stats
        return compute_metrics(
            run,
            slo_ttft_ms=stats.slo_ttft_ms,
            slo_tpot_ms=stats.slo_tpot_ms,
            percentile_metrics=stats.percentile_metrics,
            metric_percentiles=stats.metric_percentiles,
        )

    def goodput(self, index: int) -> dict[str, Any]:
        """Highest request rate at which >= 90% of requests meet both SLOs (bisection)."""
        base_rate = arrival_rate(self.base.requests)

        def attainment(scale: float) -> float:
            value = self.metrics(self.run_arm(index, scale))["slo_attainment"]
            return float(value) if value is not None else 0.0

        lo, hi = 0.0, self.spec.workload.rate_scale
        while attainment(hi) >= GOODPUT_TARGET and hi < 1024:
            lo, hi = hi, hi * 2
        if lo == 0.0:
            lo = hi
            while lo > 1e-3 and attainment(lo) < GOODPUT_TARGET:
                hi, lo = lo, lo / 2
            if lo <= 1e-3:
                return {"goodput_rps": 0.0, "goodput_rate_scale": 0.0}
        for _ in range(6):
            mid = (lo + hi) / 2
            if attainment(mid) >= GOODPUT_TARGET:
                lo = mid
            else:
                hi = mid
        return {"goodput_rps": lo * base_rate, "goodput_rate_scale": lo}


def engine_cost(
    s: dict[str, Any], where: str = "", *, served: bool = False
) -> tuple[StepCostModel, ModelProfile, GPUProfile]:
    """The step-time model of the engine settings ``s`` (``EngineSpec``'s keys), and the
    model and GPU profiles the KV cache is sized from; ``where`` prefixes errors.
    ``served``: ``s["model"]`` may name a served model (``--engine openai``) the
    simulator has no profile of."""
    overlap = s["async_scheduling"]
    try:
        model_name = register_model_dir(s["model"]) or s["model"]
        if served and model_name.lower() not in {m.lower() for m in DEFAULT_REGISTRY.model_names()}:
            model_name = EngineSpec.model_fields["model"].default  # a served model's name:
            # the replay needs no profile of it, only the simulator's config below
        cost, model, gpu = make_cost_model(
            model_name, s["gpu"], s["tp"], s["profile"], async_scheduling=overlap
        )
    except SchedkitError as exc:
        raise SchedkitError(f"{where}{exc}") from None
    if s["kv_cache_dtype"] != "auto":  # fewer bytes per token: more blocks, less to read
        model = dataclasses.replace(model, kv_dtype_bytes=KV_CACHE_DTYPES[s["kv_cache_dtype"]])
        if not isinstance(cost, LinearCostModel):
            cost = default_cost_model(model, gpu, s["tp"], async_scheduling=overlap)
    if not overlap and not isinstance(cost, OperatorCostModel):
        timed = (
            "the cost profile given with --profile"
            if isinstance(cost, LinearCostModel)
            else f"the roofline ({model.name} on {gpu.name} has no per-operator fits:"
            " a GPU of your own profile, or an MoE or MLA model)"
        )
        raise SchedkitError(
            f"{where}--no-async-scheduling changes only the per-operator GPU model's steps"
            f" (its CPU work per step adds to the GPU's), and this run's steps are timed by"
            f" {timed}, which has no CPU work to overlap; drop --no-async-scheduling"
        )
    return cost, model, gpu


def sim_config_of(
    s: dict[str, Any],
    blocks: int,
    host: dict[str, Any] | None = None,
    *,
    mixed_prefill: bool = True,
    hash_block_tokens: int = 0,
    max_concurrency: int | None = None,
) -> SimConfig:
    """The simulator's config for engine settings ``s`` with a KV cache of ``blocks``
    blocks, batching as the engine does; ``host``: its host KV tier's fields
    (``host_tier``)."""
    return SimConfig(
        **(host or {}),
        num_blocks=blocks,
        block_size=s["block_size"],
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        long_prefill_token_threshold=s["long_prefill_token_threshold"],
        prefill_schedule_interval=s["prefill_schedule_interval"],
        cache_aware_admission_window=s["cache_aware_admission_window"],
        cache_aware_admission_threshold=s["cache_aware_admission_threshold"],
        enable_prefix_caching=s["prefix_caching"],
        mixed_prefill=mixed_prefill,
        hash_block_tokens=hash_block_tokens,
        max_concurrency=max_concurrency,
        eviction_window=(
            DEFAULT_EVICTION_WINDOW if s["eviction_window"] is None else s["eviction_window"]
        ),
    )


def host_tier(s: dict[str, Any], model: ModelProfile) -> dict[str, Any]:
    """``SimConfig``'s host KV tier for settings ``s``: ``kv_offloading_size`` GiB, summed
    over TP ranks as vLLM counts it, in blocks of every rank's share of a block; a load
    moves each rank's share over its own link at ``kv_offloading_bandwidth`` GB/s."""
    if not s["kv_offloading_size"]:
        return {}
    tp = s["tp"]
    block_bytes = model.kv_bytes_per_token * max(1, tp // model.num_kv_heads) * s["block_size"]
    return {
        "host_kv_blocks": int(s["kv_offloading_size"] * (1 << 30) // block_bytes),
        "host_kv_block_load_s": block_bytes / tp / (s["kv_offloading_bandwidth"] * 1e9),
        "host_kv_load_latency_s": s["kv_offloading_latency_ms"] / 1e3,
    }


def arrival_rate(requests: Sequence[TraceRequest]) -> float:
    """Requests per second from the first arrival to the last (their count if they all
    arrive at once)."""
    span = requests[-1].arrival_s - requests[0].arrival_s
    return len(requests) / span if span > 0 else float(len(requests))


TRUNCATION_RATE = 1.5  # the cut-off stretch is this much busier than what was kept: flag
SCAN_REQUESTS = 200_000  # read this far into a trace with --max-requests (a 1 GB one: 0.5 s)


def truncation_flag(
    full: Workload, kept: Workload, count: int, *, partial: bool = False, rate_scale: float = 1.0
) -> dict[str, Any] | None:
    """A flag when ``--max-requests`` kept a quiet start of a trace that gets much busier
    later: every arm would look alike. Suggests the busiest stretch as ``--window``;
    ``partial``: ``full`` is only the start of the trace (``SCAN_REQUESTS`` read). The
    rates and times are the replay's, at ``rate_scale``; the window is in the trace's
    seconds, as ``--window`` takes it. ``kept_rate_rps`` and ``busiest_rate_rps`` are the
    replay's rates."""
    span = kept.requests[-1].arrival_s - kept.requests[0].arrival_s
    start, end = full.busiest(count)
    if end <= start:
        return None
    busy_rate = count / (end - start) * rate_scale
    kept_rate = count / span * rate_scale if span > 0 else float("inf")
    if busy_rate < TRUNCATION_RATE * kept_rate:
        return None
    window = f"{start:.0f}:{end + 1:.0f}"
    if rate_scale != 1.0:
        window += (
            f" (the trace's seconds, as --window takes them; at --rate-scale {rate_scale:g}"
            f" that stretch replays in {(end - start) / rate_scale:,.1f} s)"
        )
    return {
        "kind": "truncated",
        "message": (
            f"--max-requests {count} kept the first {span:,.1f} s of {full.name}, replayed"
            f"{f' at {rate_scale:g}x in {span / rate_scale:,.1f} s' if rate_scale != 1 else ''}"
            f" at {kept_rate:.2f} req/s, but its busiest {count} requests"
            f"{f' of the first {len(full.requests):,} read' if partial else ''} would arrive at"
            f" {busy_rate:.2f} req/s (the trace's {start:,.1f} to {end:,.1f} s); the cut trace"
            f" may not load the engine. Try --window {window}"
        ),
        "kept_rate_rps": kept_rate,
        "busiest_rate_rps": busy_rate,
        "suggested_window": [float(f"{start:.0f}"), float(f"{end + 1:.0f}")],
    }


def _arm(bench: Bench, index: int) -> tuple[RunResult, dict[str, Any]]:
    run = bench.run_arm(index, bench.spec.workload.rate_scale)
    run.policy = bench.labels[index]
    metrics = bench.metrics(run)
    if bench.spec.stats.goodput:
        metrics.update(bench.goodput(index))
    return run, metrics


_FORKED: Bench | None = None  # the bench a forked worker inherited


def _forked_arm(index: int) -> tuple[RunResult, dict[str, Any]]:
    assert _FORKED is not None
    return _arm(_FORKED, index)


def run_arms(bench: Bench) -> tuple[list[RunResult], list[dict[str, Any]]]:
    """Every arm's result and metrics, in arm order. On the simulator, arms run in
    parallel processes (``--jobs``, default one per CPU core), forked from this one so
    that they share the parsed workload (``schedkit.bench.workers``: a policy's exit-time
    code runs there as in this process); the results are the same as run one by one.
    Real engines run one arm at a time (each holds the accelerator). Progress is shown
    per arm done and, within an arm, per simulated second or request
    (``schedkit.bench.progress``); Ctrl-C raises :class:`Interrupted` naming the arms
    done."""
    n = len(bench.configs)
    jobs = min(n, bench.spec.jobs or len(os.sched_getaffinity(0)))
    forked = bench.spec.engine == "sim" and jobs >= 2 and "fork" in mp.get_all_start_methods()
    requests = len(bench.base.requests)
    intro = (
        f"bench: {n} arm{'s' if n != 1 else ''} ({', '.join(bench.labels)}), {requests:,}"
        f" requests each, {f'{jobs} at once' if forked else 'one at a time'}"
    )
    unit = "arms" if n != 1 else "arm"
    with tracking(
        "bench", n, unit, fine=not bench.spec.stats.goodput, intro=intro, kept=_kept(bench)
    ) as track:
        if not forked:
            out = []
            for i in range(n):
                out.append(_arm(bench, i))
                track.item_done(bench.labels[i])
        else:
            out = _forked_arms(bench, jobs, track)
    return [run for run, _ in out], [metrics for _, metrics in out]


def _forked_arms(bench: Bench, jobs: int, track: Tracker) -> list[tuple[RunResult, dict[str, Any]]]:
    global _FORKED
    _FORKED = bench
    try:
        with fork_pool(jobs) as pool:
            futures = {pool.submit(_forked_arm, i): i for i in range(len(bench.configs))}
            for future in as_completed(futures):
                future.result()  # a failed arm fails the bench now
                track.item_done(bench.labels[futures[future]])
            return [f.result() for f in futures]
    finally:
        _FORKED = None


def _kept(bench: Bench) -> str:
    """What an interrupted bench kept: no results (they are written at the end)."""
    if bench.out_dir is None:
        return "nothing written"
    untouched = (
        "; the earlier results there are untouched"
        if (bench.out_dir / "results.json").exists()
        else ""
    )
    return f"no results written to {bench.out_dir}{untouched}"


def run_bench(spec: BenchSpec, out_dir: Path, *, overwrite: bool = False) -> Results:
    """Run every arm on the identical request stream; write results.json, requests.parquet
    (requests.csv without pyarrow) and the reports, all or nothing. An ``out_dir`` holding
    another run's results is refused unless ``overwrite`` (:func:`check_replacing`)."""
    check_out_dir(out_dir)  # now, not after every arm ran
    check_replacing(out_dir, overwrite)
    bench = Bench(spec)
    bench.out_dir = out_dir  # where arms write files of their own (--serve-command's logs)
    no_slo = spec.stats.slo_ttft_ms is None and spec.stats.slo_tpot_ms is None
    if (
        spec.stats.goodput
        and no_slo
        and not any(r.slo_ttft_ms or r.slo_tpot_ms for r in bench.base.requests)
    ):
        raise SchedkitError("--goodput needs SLOs: pass --slo-ttft-ms and/or --slo-tpot-ms")
    runs, arm_metrics = run_arms(bench)
    if spec.engine != "sim" and all(a.overrides for a in bench.arms):
        # No arm ran with the bench's own settings: its entry is timed as the arms were.
        first = bench.arm_engines[0][0]
        bench.engine_info.update({k: first[k] for k in ("gpu", "real") if k in first})
        if "cost_model" not in first:
            bench.engine_info.pop("cost_model", None)
    tables = [RequestTable.of(run) for run in runs]  # each request's latencies, once
    results = _results(bench, runs, arm_metrics, tables)
    slos = spec.stats
    write_outputs(
        out_dir, results, runs, slo_ttft_ms=slos.slo_ttft_ms, slo_tpot_ms=slos.slo_tpot_ms,
        replace=overwrite, tables=tables,
    )  # fmt: skip
    return results


def _results(
    bench: Bench,
    runs: list[RunResult],
    arm_metrics: list[dict[str, Any]],
    tables: Sequence[RequestTable] | None = None,
) -> Results:
    """What the run says: the workload, engine and arms, their flags and comparisons
    (``tables``: the arms' :class:`RequestTable`, when built already)."""
    spec = bench.spec
    arms = [
        {
            "policy": arm.label,
            "config": arm.config.model_dump(),
            "engine_settings": arm.overrides,  # what the arm sets; the rest: "engine" below
            "engine": engine[0] if arm.overrides else None,  # the arm's, when it differs
            "metrics": metrics,
        }
        for arm, engine, metrics in zip(bench.arms, bench.arm_engines, arm_metrics, strict=True)
    ]
    window = list(spec.workload.window) if spec.workload.window else None
    fields: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "provenance": provenance(spec.model_dump(mode="json")),
        "workload": {
            **_workload_summary(bench.base, spec.workload.rate_scale),
            "rate_scale": spec.workload.rate_scale,
            "seed": spec.workload.seed,
            "window_s": window,
            "max_requests": spec.workload.max_requests,
            **({"all_at_once": True} if spec.workload.all_at_once else {}),
            **_given(max_concurrency=spec.workload.max_concurrency),
        },
        "engine": bench.engine_info,
        "slo": {"ttft_ms": spec.stats.slo_ttft_ms, "tpot_ms": spec.stats.slo_tpot_ms},
        "arms": arms,
        "warnings": bench.warnings,
        "flags": bench.flags + run_flags(runs, tables),
    }
    fields["comparisons"] = compare_arms(
        runs,
        slo_ttft_ms=spec.stats.slo_ttft_ms,
        slo_tpot_ms=spec.stats.slo_tpot_ms,
        min_effect=spec.stats.min_effect,
        metrics=spec.stats.verdict_metrics or METRIC_KEYS,
        # the trace's seconds of an episode; none when the arrivals are no longer the trace's
        rate_scale=None if _sent_otherwise(spec) else spec.workload.rate_scale,
        window_s=window,
        tables=tables,
    )
    return Results.model_validate(fields)


def _workload_summary(base: Workload, rate_scale: float) -> dict[str, object]:
    """``base.scaled(rate_scale).summary()`` without rescaling every request: the
    arrivals' rate changes only the first and last arrival, the source and the rate."""
    if rate_scale == 1.0 or not base.requests:
        return base.scaled(rate_scale).summary()
    ends = dataclasses.replace(base, requests=(base.requests[0], base.requests[-1]))
    scaled = ends.scaled(rate_scale).summary()
    span = scaled["span_s"]
    assert isinstance(span, float)  # arrivals over a rate scale
    return {
        **base.summary(),
        "source": scaled["source"],
        "span_s": span,
        "rate_rps": len(base.requests) / span if span > 0 else 0.0,
    }


def _given(**values: Any) -> dict[str, Any]:
    """The ``values`` that are set (results.json leaves an unset optional key out)."""
    return {key: value for key, value in values.items() if value is not None}


def _sent_otherwise(spec: BenchSpec) -> bool:
    """Whether requests are sent at other times than the trace's, rescaled: all at once,
    or when the client's --max-concurrency lets them."""
    return spec.workload.all_at_once or spec.workload.max_concurrency is not None


def __getattr__(name: str) -> object:
    """``replay``, renamed ``simulate`` (issue #36): "replay" names running a workload
    through any engine; this function runs it on the simulator."""
    if name == "replay":
        import warnings

        warnings.warn(
            "schedkit.bench.runner.replay is now simulate; use the new name (the old one goes"
            " in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return simulate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
