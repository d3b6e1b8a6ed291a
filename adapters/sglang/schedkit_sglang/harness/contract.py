"""The contract suite's SGLang driver: a scenario through the real SGLang engine.

``run_sglang`` replays a ``schedkit.testing.contract.Scenario`` through an in-process
``sglang.Engine`` (its scheduler in a spawned process, as always) and returns the
``Outcome`` the suite's checks read. The scenario's engine config maps onto SGLang's
knobs as closely as SGLang allows:

- ``max_num_seqs`` is ``max_running_requests``; ``max_num_batched_tokens`` is
  ``max_prefill_tokens`` (the prefill batch's token budget) and ``chunked_prefill_size``,
  which is ``long_prefill_token_threshold`` instead when the scenario sets one (SGLang has
  one chunk size for the prefill batch, not a cap per request);
- the KV cache is ``num_blocks * block_size`` tokens (``max_total_tokens``) in pages of
  ``block_size`` (``page_size``); ``enable_prefix_caching`` off is
  ``disable_radix_cache``; a policy that chooses evictions gets the ``schedkit``
  radix-cache backend, as ``schedkit serve sglang`` adds it;
- ``schedule_conservativeness=0``: SGLang then admits a request when its prompt fits, as
  vLLM and the simulator do, instead of reserving room for 70% of every running
  request's remaining output, and retracts decoding requests when the cache runs out.

Requests are token-id prompts (``schedkit.bench.engines.requests.prompt_token_ids``, mixed into
the model's vocabulary; shared prefixes stay shared), ``max_new_tokens`` their output
length with ``ignore_eos``, tenant and SLO targets in ``custom_params`` and SGLang's own
``priority``, as the adapter reads them.

The policies run in SGLang's scheduler process, so they are selected by name
(``SCHEDKIT_POLICY``, ``SCHEDKIT_OPTIONS``) with ``contract-recorder`` (the suite's
``ContractRecorder``) appended last, and what the engine did is recorded there too, by
the driver's ``schedkit_contract`` SGLang plugin (``harness.contract_plugin``), which
also shows the recorder what the victim hook is shown. Both come from a site directory
the driver puts on the path for the engine's processes (spawned processes take
``sys.path`` from this one); ``contract-flaky`` (the suite's ``Flaky``) is installed
there as well. After the replay the driver reads everything back through SGLang's
internal-state readback (``Engine.get_server_info()``).

Arrivals and the clock: SGLang runs on the wall clock, and requests sent at once may reach its
scheduler across several loop iterations. So the driver sends every request at once, in
arrival order, and the plugin holds each in the scheduler until its arrival comes
relative to SGLang's count of batches run (``forward_ct``): a request arriving at
``k * step_s`` joins the waiting queue before batch ``k + 1`` is formed, as the
simulator's step ``k`` sees it, and the requests of one arrival step are all waited for
before that batch is formed. An idle engine skips ahead to the next arrival, as the
simulator's clock does. Policies see the simulator's clock too (``use_clock`` on the
adapter's engine view, as the vLLM engine driver does): ``step_s`` per step counted so,
and each request's arrival at the scenario's time, so waits, deadlines and aging mean
what they mean on the simulator, not whatever the wall clock of a busy CPU says. SGLang's
steps are its batches (a prefill batch and a decode batch are separate steps, where the
simulator mixes them), so the arrival step is the same count, not the same batch
contents: ``Outcome.batches_comparable`` is False.

What the Outcome holds: ``steps`` (tokens per request in each batch SGLang launched:
``Req.extend_len`` in a prefill batch, 1 in a decode batch) with the requests retracted
or preempted while it was formed (``preempted``), ``admitted`` (order of first
scheduling), each request's finish reason and output tokens from its final output
(``finish_reason`` type; a rejection is SGLang's 503 abort ``"rejected: <reason>"``),
``blocks_leaked`` (KV pages neither free nor evictable once the engine is idle),
``policy_errors`` (the adapter's count) and the recorder's observations.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import gc
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedkit.testing.contract import Outcome, Scenario

from schedkit_sglang.harness.contract_plugin import CONTRACT_VAR, RECORDER, STATE_KEY, load

if TYPE_CHECKING:
    from schedkit.config import SchedkitConfig
    from schedkit.testing.contract_run import ContractEngine
    from schedkit.workload import TraceRequest

__all__ = ["CONTRACT_VAR", "FLAKY", "RECORDER", "contract_engines", "load", "run_sglang"]

log = logging.getLogger("schedkit.sglang")

FLAKY = "contract-flaky"
_ENTRY_POINTS = f"""\
[schedkit.policies]
{RECORDER} = schedkit.testing.contract:ContractRecorder
{FLAKY} = schedkit.testing.contract:Flaky

[sglang.srt.plugins]
schedkit_contract = schedkit_sglang.harness.contract_plugin:load
"""
_EPS = 1e-9
_SETTLE_S = 30.0  # longest wait for the engine to go idle after the last output


# -------------------------------------------------------------------------
# The driver (this process)
# -------------------------------------------------------------------------


def run_sglang(
    scenario: Scenario,
    policy_names: Sequence[str],
    model_dir: str | Path,
    *,
    overlap: bool,
    options: Mapping[str, Any] | None = None,
) -> Outcome:
    """``scenario`` through a real ``sglang.Engine`` on ``model_dir`` with the installed
    policies ``policy_names`` (``options`` per policy, as in ``SCHEDKIT_OPTIONS``), in
    SGLang's overlap loop (``event_loop_overlap``) or its normal one."""
    from schedkit import PolicyFacade
    from schedkit.bench.engines.requests import model_info

    if RECORDER in policy_names:
        raise ValueError(f"{RECORDER!r} is appended by the driver; do not name it")
    info = model_info(str(model_dir), "sglang")
    traces = sorted(scenario.requests, key=lambda r: r.arrival_s)
    requests = _requests(scenario, traces, info.vocab_size)
    env = _environ(scenario, traces, policy_names, options)
    outcome = Outcome("sglang-overlap" if overlap else "sglang", batches_comparable=False)
    with _contract_site() as site:
        selected = {"policy": list(policy_names), "options": dict(options or {})}
        evicts = PolicyFacade.from_config(selected).has_evictions
        # SGLang admits prompts up to context_length - 6 tokens, and prompt + output below it.
        longest = max(t.prompt_tokens + t.output_tokens for t in traces) + 8
        kwargs = engine_kwargs(scenario, evicts, overlap, min(info.max_positions, longest))
        kwargs["model_path"] = str(model_dir)
        llm = _start(kwargs, env, site)
        try:
            outputs = llm.loop.run_until_complete(_submit(llm, requests))
            state = _settled_state(llm)
        finally:
            _shutdown(llm)
    if state["disable_overlap_schedule"] is overlap:
        raise RuntimeError(f"SGLang did not run its {'overlap' if overlap else 'normal'} loop")
    for trace, output in zip(traces, outputs, strict=True):
        _read_output(outcome, trace.request_id, output)
    _read_state(outcome, state)
    return outcome


def _requests(
    scenario: Scenario, traces: Sequence[TraceRequest], vocab_size: int
) -> list[dict[str, Any]]:
    """``Engine.async_generate`` arguments of each request in ``traces`` (arrival order):
    a token-id prompt, ``max_new_tokens`` with ``ignore_eos``, tenant and SLO targets in
    ``custom_params`` and SGLang's own ``priority``, as the adapter reads them."""
    from schedkit.bench.engines.requests import prompt_token_ids, request_metadata

    cfg = scenario.config
    return [
        {
            "input_ids": prompt_token_ids(t, i, cfg.block_size, cfg.hash_block_tokens, vocab_size),
            "sampling_params": {
                "max_new_tokens": t.output_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
                "custom_params": request_metadata(t),
            },
            "priority": t.priority,
            "rid": t.request_id,
        }
        for i, t in enumerate(traces)
    ]


def _environ(
    scenario: Scenario,
    traces: Sequence[TraceRequest],
    policy_names: Sequence[str],
    options: Mapping[str, Any] | None,
) -> dict[str, str | None]:
    """The environment the engine's processes start with: the policies by name with the
    recorder last, and each request's arrival step and time for the plugin."""
    from schedkit_sglang.config import CONFIG_VAR, OPTIONS_VAR, POLICY_VAR

    arrivals = [
        [t.request_id, max(0, math.ceil(t.arrival_s / scenario.step_s - _EPS)), t.arrival_s]
        for t in traces
    ]
    return {
        CONFIG_VAR: None,
        POLICY_VAR: "+".join([*policy_names, RECORDER]),
        OPTIONS_VAR: json.dumps(dict(options)) if options else None,
        CONTRACT_VAR: json.dumps({"arrivals": arrivals, "step_s": scenario.step_s}),
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
        # SGLang admits a request only when its prompt and all its output would fit
        # (up to this many new tokens): one, as the simulator admits what fits now.
        "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "1",
    }


def engine_kwargs(
    scenario: Scenario, evicts: bool, overlap: bool, context_length: int
) -> dict[str, Any]:
    """``sglang.Engine`` arguments for ``scenario``'s engine config (module docstring)."""
    from schedkit_sglang import cpu
    from schedkit_sglang.eviction import BACKEND
    from schedkit_sglang.harness.real import on_cpu

    cfg = scenario.config
    kwargs: dict[str, Any] = {
        "skip_tokenizer_init": True,
        "context_length": context_length,
        "page_size": cfg.block_size,
        "max_total_tokens": cfg.num_blocks * cfg.block_size,
        "max_running_requests": cfg.max_num_seqs,
        "max_prefill_tokens": cfg.max_num_batched_tokens,
        "chunked_prefill_size": cfg.long_prefill_token_threshold or cfg.max_num_batched_tokens,
        "disable_radix_cache": not cfg.enable_prefix_caching,
        "schedule_policy": "fcfs",
        "schedule_conservativeness": 0.0,
        "random_seed": 0,
        "log_level": "error",
    }
    if evicts and cfg.enable_prefix_caching:
        kwargs["radix_cache_backend"] = BACKEND
    if on_cpu():
        kwargs.update(cpu.ENGINE_ARGS)
    kwargs["disable_overlap_schedule"] = not overlap
    return kwargs


@contextlib.contextmanager
def _contract_site() -> Iterator[Path]:
    """A site directory whose dist-info installs the contract's policies and SGLang
    plugin, on ``sys.path`` (which spawned processes inherit) for the block."""
    site = Path(tempfile.mkdtemp(prefix="schedkit-sglang-contract-"))
    info = site / "schedkit_sglang_contract-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: schedkit-sglang-contract\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(_ENTRY_POINTS)
    sys.path.append(str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        shutil.rmtree(site, ignore_errors=True)


def _start(kwargs: dict[str, Any], env: dict[str, str | None], site: Path) -> Any:
    """``sglang.Engine(**kwargs)`` with ``env`` and ``site`` for its processes; this
    process's environment is restored afterwards."""
    from schedkit_sglang import cpu
    from schedkit_sglang.config import scoped_environ

    if kwargs.get("device") == "cpu":
        cpu.install()
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        path = cpu.pythonpath(os.environ.get("PYTHONPATH", ""))
    else:
        path = os.environ.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join([p for p in (path, str(site)) if p])
    with scoped_environ(env):
        import sglang

        return sglang.Engine(**kwargs)


def _shutdown(llm: Any) -> None:
    try:
        llm.shutdown()
    except Exception:  # pragma: no cover - best effort
        log.debug("engine shutdown failed", exc_info=True)
    atexit.unregister(llm.shutdown)
    gc.collect()


async def _submit(llm: Any, requests: list[dict[str, Any]]) -> list[Any]:
    """Every request at once, in arrival order; a refused one gives its exception."""
    tasks = [asyncio.ensure_future(llm.async_generate(**r)) for r in requests]
    return list(await asyncio.gather(*tasks, return_exceptions=True))


def _read_output(outcome: Outcome, rid: str, output: Any) -> None:
    """How request ``rid`` ended, from its final output (or the exception SGLang raised
    for a request it aborted before running it: HTTP 503 for a rejection)."""
    if isinstance(output, BaseException):
        message, kind, tokens = str(getattr(output, "detail", output)), "abort", 0
    else:
        meta = output.get("meta_info") or {}
        reason = meta.get("finish_reason")
        kind = str(reason.get("type", "")) if isinstance(reason, Mapping) else str(reason)
        message = str(reason.get("message", "")) if isinstance(reason, Mapping) else ""
        tokens = int(meta.get("completion_tokens") or 0)
    outcome.output_tokens[rid] = tokens
    if kind == "abort" and message.startswith("rejected: "):
        outcome.finished[rid] = "rejected"
        outcome.rejected[rid] = message.removeprefix("rejected: ")
    elif kind == "abort":
        outcome.finished[rid] = "aborted"
        log.warning("contract: %s aborted: %s", rid, message)
    else:
        outcome.finished[rid] = kind or "stop"


def _settled_state(llm: Any) -> dict[str, Any]:
    """The scheduler's internal state once it is idle: every launched batch's results
    processed and reported (the overlap loop processes the last one an iteration late)."""
    deadline = time.monotonic() + _SETTLE_S
    while True:
        info = llm.get_server_info()
        [state] = info["internal_states"]
        ours = state.get(STATE_KEY)
        if not isinstance(ours, dict):
            raise RuntimeError("the schedkit_contract plugin did not load in SGLang's scheduler")
        if ours["idle"] or time.monotonic() > deadline:
            return {**state, "disable_overlap_schedule": info.get("disable_overlap_schedule")}
        time.sleep(0.05)


def _read_state(outcome: Outcome, state: Mapping[str, Any]) -> None:
    ours = state[STATE_KEY]
    for batch in ours["batches"]:
        tokens: dict[str, int] = batch["tokens"]
        if tokens or batch["preempted"]:
            outcome.steps.append(dict(tokens))
            outcome.preempted.append(sorted(batch["preempted"]))
        outcome.admitted.extend(rid for rid in tokens if rid not in outcome.admitted)
    kv = ours["kv"]
    used = int(kv["total"]) - int(kv["available"]) - int(kv["evictable"])
    outcome.blocks_leaked = -(-used // max(1, int(kv["page_size"])))
    outcome.policy_errors = int(state["schedkit"]["policy_errors"])
    seen = ours["recorder"]
    rec = outcome.recorder
    rec.arrived = Counter(seen["arrived"])
    rec.reported = Counter(seen["reported"])
    rec.reports = int(seen["reports"])
    rec.finished = {rid: list(reasons) for rid, reasons in seen["finished"].items()}
    rec.preempted = list(seen["preempted"])
    rec.steps = [(list(ids), int(running)) for ids, running in seen["steps"]]
    rec.arrivals = [(int(reported), int(running)) for reported, running in seen["arrivals"]]
    rec.clocks = {rid: (float(at), float(clock)) for rid, (at, clock) in seen["clocks"].items()}
    rec.cached = {rid: int(hit) for rid, hit in seen["cached"].items()}
    rec.victim_calls = [
        (str(needing), [(str(rid), int(computed)) for rid, computed in running])
        for needing, running in seen["victim_calls"]
    ]
    rec.drifted = [str(change) for change in seen["drifted"]]


# -------------------------------------------------------------------------
# ``schedkit contract`` (entry point ``schedkit.contract``)
# -------------------------------------------------------------------------


def contract_engines(model: Path | None = None) -> list[ContractEngine]:
    """SGLang for ``schedkit contract`` (entry point ``schedkit.contract``): the real
    engine in its normal loop (``sglang``) and in its overlap loop (``sglang-overlap``,
    ``event_loop_overlap``, the GPU default), one engine start per scenario, on
    ``model`` or else a tiny random-weight Llama built once per process. Batches are
    not compared (SGLang's are not the simulator's steps); select_victims is partial in
    the capability matrix, so only victim calls shown as on the simulator are compared;
    the order of a policy reading waits or learning from step reports may differ where
    the matrix's order_waiting note says why.
    On a CPU-only machine they run on CPU, set up as the adapter's tests set it up."""
    import importlib.util

    from schedkit.testing.contract_run import (
        ContractEngine,
        Relaxed,
        order_unless_time_bound,
        same_admission_order,
        victims_where_shown_alike,
    )

    if importlib.util.find_spec("sglang") is None:
        raise ImportError("SGLang is not installed here (schedkit-sglang needs it)")

    def engine(name: str, overlap: bool) -> ContractEngine:
        def run(scenario: Scenario, config: SchedkitConfig) -> Outcome:
            _on_cpu()
            model_dir = model if model is not None else _tiny_model()
            return run_sglang(
                scenario, config.policy, model_dir, overlap=overlap, options=config.options
            )

        return ContractEngine(
            name,
            run,
            "sglang",
            same_batches=False,
            partial={
                "order_waiting": Relaxed(
                    order_unless_time_bound(same_admission_order, _PACE), "order_waiting"
                ),
                "select_victims": Relaxed(victims_where_shown_alike, "select_victims"),
            },
            note=_NOTE,
        )

    return [engine("sglang", overlap=False), engine("sglang-overlap", overlap=True)]


_PACE = (
    "SGLang's batches (prefill apart from decode, a prefill batch taking the whole chunk;"
    " in the overlap loop a finished request's slot reused a batch later) bring its clock"
    " and step reports at another pace"
)
_NOTE = (
    "SGLang runs prefill and decode as separate batches (the simulator mixes them in one"
    " step) and chunks a prefill batch by one size, so its batches and their number are"
    " not the simulator's steps (not compared); admission order, victims, rejections,"
    " finishes and outputs are, with the simulator's step clock counted in SGLang's batches"
)


@functools.cache
def _tiny_model() -> Path:
    """A tiny random-weight Llama (``schedkit.testing.models.tiny_llama``, no tokenizer:
    the driver sends token ids), once per process, in a directory removed at exit."""
    from schedkit.testing.models import tiny_llama

    _on_cpu()  # transformers may import torchvision, which a lean CPU install stubs
    root = Path(tempfile.mkdtemp(prefix="schedkit-sglang-model-"))
    atexit.register(shutil.rmtree, root, True)
    return tiny_llama(root / "tiny-llama")


@functools.cache
def _on_cpu() -> bool:
    """Whether SGLang runs on CPU here (``harness.real.on_cpu``); if so, once per
    process, what the adapter's test suite sets up before SGLang is imported: the
    CPU engine, the stand-ins for CUDA-only modules in this process and (on
    ``PYTHONPATH``) in every process SGLang spawns, and no Hugging Face hub."""
    from schedkit_sglang import cpu
    from schedkit_sglang.harness.real import on_cpu

    if not on_cpu():
        return False
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    os.environ["PYTHONPATH"] = cpu.pythonpath(os.environ.get("PYTHONPATH", ""))
    cpu.install()
    return True
