"""``schedkit serve sim``'s ``/metrics``: vLLM's series a router and dashboards read, and
schedkit's.

Each server has its own registry (several servers in one process, as in tests and Ray
Serve replicas, keep their own series), collected when scraped: nothing is counted on
the engine's path beyond the counters it keeps anyway.

- vLLM's: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:kv_cache_usage_perc``, ``vllm:cache_config_info{block_size,num_gpu_blocks}``,
  ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
  ``vllm:request_success_total{finished_reason}``, each with ``model_name``.
- schedkit's: ``schedkit_rejections_total{policy,reason}``,
  ``schedkit_policy_errors_total{policy,hook}``, ``schedkit_hook_over_budget_total{policy,hook}``
  (as the engine adapters export them, ``schedkit.prometheus``); the simulator calls the
  policies without timing each call, so ``schedkit_policy_decisions_total`` and
  ``schedkit_hook_latency_seconds`` are not exported. And the simulator's own:
  ``schedkit_sim_lag_seconds`` (how late the last step started),
  ``schedkit_sim_late_steps_total`` (steps later than ``--max-lag-ms``),
  ``schedkit_sim_steps_total``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from schedkit.facade import PolicyFacade
from schedkit.prometheus import reason_label
from schedkit.simserver.clock import WallClockEngine

__all__ = ["metrics_page"]


def _families(
    clock: WallClockEngine, facade: PolicyFacade, model: str, gauges: Mapping[str, float]
) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        family = GaugeMetricFamily(name, name, labels=["model_name"])
        family.add_metric([model], gauges[name])
        yield family
    info = GaugeMetricFamily("vllm:cache_config_info", "KV cache config",
                             labels=["block_size", "num_gpu_blocks"])  # fmt: skip
    info.add_metric(
        [str(int(gauges["vllm:block_size"])), str(int(gauges["vllm:num_gpu_blocks"]))], 1
    )
    yield info
    for name, value in (("vllm:prompt_tokens", clock.prompt_tokens),
                        ("vllm:generation_tokens", clock.generation_tokens)):  # fmt: skip
        counter = CounterMetricFamily(name, name, labels=["model_name"])
        counter.add_metric([model], value)
        yield counter
    success = CounterMetricFamily("vllm:request_success", "finished requests",
                                  labels=["model_name", "finished_reason"])  # fmt: skip
    success.add_metric([model, "length"], clock.finished.get("length", 0))
    yield success
    yield from _schedkit(clock, facade)


def _schedkit(clock: WallClockEngine, facade: PolicyFacade) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    policy = facade.label
    rejections = CounterMetricFamily("schedkit_rejections", "rejected at admission",
                                     labels=["policy", "reason"])  # fmt: skip
    labelled: dict[str, int] = {}
    for why, n in clock.rejections.items():
        label = reason_label(why)
        labelled[label] = labelled.get(label, 0) + n
    for label, n in labelled.items():
        rejections.add_metric([policy, label], n)
    yield rejections
    for name, counts in (("schedkit_policy_errors", facade.errors),
                         ("schedkit_hook_over_budget", facade.slow_calls)):  # fmt: skip
        family = CounterMetricFamily(name, name, labels=["policy", "hook"])
        for (who, hook), n in counts.items():
            family.add_metric([who, hook], n)
        yield family
    lag = GaugeMetricFamily("schedkit_sim_lag_seconds", "how late the last step started")
    lag.add_metric([], clock.lag_s)
    yield lag
    for name, value in (("schedkit_sim_late_steps", clock.late_steps),
                        ("schedkit_sim_steps", clock.engine.step_index)):  # fmt: skip
        family = CounterMetricFamily(name, name)
        family.add_metric([], value)
        yield family


class _Collector:
    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> Iterator[Any]:
        return iter(self.families)


def metrics_page(
    clock: WallClockEngine, facade: PolicyFacade, model: str, gauges: Mapping[str, float]
) -> str:
    """The Prometheus text page of a server now: its engine, policies, served model
    name and gauges (``SimServer.gauges``)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(list(_families(clock, facade, model, gauges))))
    return generate_latest(registry).decode()
