"""A KV connector that loads remote prefills asynchronously and lets the test say when
each load lands: what a disaggregated decode instance does (vLLM's NIXL connector), with
no worker and no transfer.

A request whose ``kv_transfer_params`` say ``do_remote_prefill`` gets its whole prompt
from the connector, loaded asynchronously (``load_kv_async=True``); vLLM parks it in
``WAITING_FOR_REMOTE_KVS`` holding its blocks until a step's ``kv_connector_output``
reports it in ``finished_recving`` (``landed``). vLLM 0.34 keeps such requests in
``async_kv_waiting`` before their load starts (``may_load_async``: the base class's,
``do_remote_prefill``) when ``--max-num-inflight-kv-loads`` is set. Loaded with
``KVTransferConfig(kv_connector="RemoteKV", kv_connector_module_path="remote_kv")``.
"""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)
from vllm.v1.outputs import KVConnectorOutput

__all__ = ["RemoteKV", "landed"]


class RemoteKV(KVConnectorBase_V1):  # type: ignore[misc]
    """The scheduler side of a connector whose loads the test completes."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.started: list[str] = []  # request ids, in the order their loads started
        self.loading: set[str] = set()  # started, not yet reported landed

    # -- scheduler side ---------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
        params = request.kv_transfer_params or {}
        count = len(request.prompt_token_ids) - num_computed_tokens
        if params.get("do_remote_prefill") and count > 0:
            return count, True
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if params and params.get("do_remote_prefill") and num_external_tokens > 0:
            params["do_remote_prefill"] = False  # as NIXL's: one load per request
            self.started.append(request.request_id)
            self.loading.add(request.request_id)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        return KVConnectorMetadata()

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, None]:
        self.loading.discard(request.request_id)
        return False, None

    # -- worker side: never called, there is no worker ---------------------------------

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise AssertionError("model-less: no worker")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise AssertionError("model-less: no worker")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kw: Any) -> None:
        raise AssertionError("model-less: no worker")

    def wait_for_save(self) -> None:
        raise AssertionError("model-less: no worker")


def landed(connector: RemoteKV, request_ids: set[str] | None = None) -> KVConnectorOutput:
    """A step's ``kv_connector_output`` reporting ``request_ids`` (default: every load in
    flight) landed."""
    done = set(connector.loading if request_ids is None else request_ids)
    connector.loading -= done
    return KVConnectorOutput(finished_recving=done)
