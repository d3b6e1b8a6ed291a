"""What the upstream lane leaves out, and the offline stand-ins it provides.

Names are ``"file.py::test"`` (every parametrization), ``"file.py::test[params]"`` (one)
or ``"file.py"`` (the whole file), for every supported vLLM: a name that matches no test
of the installed vLLM is counted, not an error.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# Tests that cannot run here, by what they need: a multimodal model, a GPU, or the
# network (a hub model's config.json; STAND_INS covers only the models the scheduler
# tests name). Each fails stock here too; none is left out because schedkit fails it.
DESELECTED: dict[str, tuple[str, ...]] = {
    "a multimodal model from the hub (llava-hf/llava-1.5-7b-hf: processor, tokenizer)": (
        *(
            f"test_scheduler.py::test_{name}"
            for name in (
                "cpu_encoder_input_updates_preserve_shm_handles",
                "cpu_encoder_input_updates_restore_after_kv_load_failure",
                "cpu_encoder_input_updates_resume_and_abort",
                "cpu_encoder_input_updates_wait_for_completed_prefill",
                "eagle3_mm_encoder_cache_with_shift",
                "ec_connector_allocate_encoder_tokens_with_external_load",
                "ec_connector_cache_hit_external_load",
                "ec_connector_cache_miss_computes_locally",
                "ec_connector_defers_running_request_for_async_reload",
                "ec_connector_ensure_cache_available_defers_request",
                "ec_connector_schedule_multiple_requests",
                "ec_connector_text_only_request",
                "ec_connector_unable_to_allocate",
                "ec_connector_update_connector_output_called",
                "ec_connector_waits_for_embeddings_in_prefix_replay",
                "ec_connector_with_partial_cache_hit_multi_round",
                "encoder_cache_accepts_matching_embed_count",
                "encoder_cache_pressure_respects_disabled_chunked_prefill",
                "encoder_cache_embed_count_mismatch_restores_prior_hit_state",
                "encoder_cache_recomputed_when_evicted_during_preemption",
                "encoder_cache_rejects_mismatched_embed_count",
                "encoder_cache_rejects_mismatched_embed_count_within_request",
                "encoder_cache_retained_across_preemption_and_resume",
                "encoder_only_prompt_longer_than_budget_is_chunked",
                "free_encoder_inputs_defers_for_eagle_lookahead",
                "free_encoder_inputs_notifies_the_ec_connector",
                "free_encoder_inputs_respects_unconfirmed_placeholders",
                "free_encoder_inputs_unchanged_without_spec_decode",
                "no_mm_input_chunking",
                "no_mm_input_chunking_after_prefix_cache_hit_inside_item",
                "no_mm_input_chunking_at_item_boundary",
                "no_mm_input_chunking_for_same_step_duplicate",
                "priority_scheduling_ec_connector_preemption_and_resumption",
                "same_step_duplicate_encoder_input_stays_cached",
                "schedule_multimodal_requests",
                "schedule_partial_requests",
                "unavailable_encoder_input_fails_the_request_as_retryable",
                "waiting_encoder_stall_does_not_starve_later_requests",
                "waiting_encoder_stall_is_counted_as_deferred",
                "waiting_encoder_stall_kv_holder_keeps_drain_priority",
            )
        ),
    ),
    "a multimodal model from the hub (Qwen/Qwen2.5-VL-3B-Instruct)": (
        "test_priority_scheduler_random.py::test_priority_scheduling_blast",
    ),
    "the network and a GPU: starts `vllm serve` on a hub model": (
        "test_hybrid_prefix_cache_hit_rate.py",
    ),
    "the network and a GPU: runs LLM() on a hub model": (
        "test_reset_prefix_cache_e2e.py",
        "test_scheduler_e2e.py",
    ),
    "a GPU: async scheduling with pipeline parallelism needs the V2 model runner": (
        "test_scheduler.py::test_async_scheduling_pp_allows_rescheduling_with_output_placeholders",
    ),
    "the network: the config of Qwen/Qwen3-0.6B (vLLM's default model) from the hub": (
        *(
            f"{module}::test_{name}"
            for module in ("test_kv_cache_utils.py", "test_kv_cache_planning.py")
            for name in (
                "auto_fit_max_model_len",
                "auto_fit_max_model_len_not_triggered",
                "auto_fit_max_model_len_reserves_null_block",
                "auto_fit_max_model_len_respects_num_gpu_blocks_override",
                "auto_fit_max_model_len_with_hybrid",
                "check_enough_kv_cache_memory_reserves_null_block",
                "check_enough_kv_cache_memory_respects_num_gpu_blocks_override",
                "get_kv_cache_config_one_worker",
                "get_kv_cache_configs_attention_free",
                "get_kv_cache_configs_multiple_workers",
                "get_kv_cache_configs_pp_sharding",
                "hisparse_pool_must_fit_max_model_len",
                "kv_cache_reserves_null_block_for_max_model_len",
                "kv_tp_replicas",
                "multi_run_layer_compact_strides_place_hoisted_heads",
                "packed_groups_glm5_like_hybrid",
                "sparse_mla_preserves_physical_row_addressing",
            )
        ),
        "test_kv_cache_utils.py::test_dcp_replicated_kpool_tail_keeps_block_interior_layout",
        "test_kv_cache_utils.py::test_dcp_target_allocates_replicated_draft_independently",
        "test_kv_cache_utils.py::test_full_attention_merge_preserves_replicated_cache_geometry",
        "test_kv_cache_utils.py::test_hisparse_derived_specs_do_not_affect_kv_cache_layout",
        "test_kv_cache_utils.py::test_hma_not_disabled_when_kv_events_enabled",
        "test_kv_cache_utils.py::test_uniform_type_spec_block_table_width_matches_layer_spec",
        "test_kv_cache_config_builder.py::TestBytesPerBlockProbe::test_probe_suppresses_override",
        "test_kv_cache_planning.py::test_eagle_groups_are_the_groups_holding_draft_layers",
        "test_kv_cache_planning.py::test_no_eagle_groups_without_eagle_block_drop",
        "test_kv_cache_planning.py::test_shrink_kv_cache_configs_keeps_tensors_and_checks_fit",
        "test_kv_cache_planning.py::test_shrink_kv_cache_configs_leaves_host_resident_tensors",
        "test_kv_cache_planning.py::test_finalize_extensible_kv_cache_keeps_measured_count",
        "test_kv_cache_planning.py::test_finalize_extensible_kv_cache_refits_auto_max_model_len",
        "test_kv_cache_planning.py::test_finalize_extensible_kv_cache_auto_max_model_len_no_room",
        "test_kv_cache_utils.py::test_pipeline_stages_resolve_a_layout_every_stage_supports",
        "test_kv_cache_utils.py::test_generate_scheduler_kv_cache_config_keeps_zeroing",
        "test_scheduler.py::test_mamba_decode_checkpoint_publication",
    ),
    "the network: the config of Qwen/Qwen1.5-7B from the hub": (
        "test_kv_cache_utils.py::test_estimate_max_model_len",
        "test_kv_cache_utils.py::test_get_max_concurrency_for_kv_cache_config",
        "test_kv_cache_planning.py::test_estimate_max_model_len",
    ),
    "the network: the config of Qwen/Qwen3-Next-80B-A3B-Instruct from the hub": (
        "test_scheduler.py::test_streaming_lookahead_hashes_follow_recomputed_kv",
    ),
    # caplog_vllm comes from vLLM's tests/conftest.py, not extracted: it imports vLLM's
    # whole model-test stack (HF runners, assets, PIL, ...). These are KV-cache layout
    # tests that check log lines, none of them a scheduler test.
    "vLLM's tests/conftest.py (its caplog_vllm fixture)": (
        "test_kv_cache_utils.py::test_mla_with_incompatible_swa_uses_one_full_allocation_group",
        "test_kv_cache_utils.py::test_no_warning_when_draft_group_is_identified",
        "test_kv_cache_utils.py::test_non_mtp_eagle_hybrid_still_warns",
        "test_kv_cache_utils.py::test_qwen3_5_mtp_draft_group_annotated_on_hybrid_path",
        "test_kv_cache_utils.py::test_unidentifiable_draft_with_mamba_warns",
        "test_kv_cache_utils.py::test_unidentifiable_draft_without_mamba_does_not_warn",
        "test_kv_cache_planning.py::test_mla_with_incompatible_swa_uses_one_full_allocation_group",
        "test_kv_cache_planning.py::test_warns_only_when_untagged_draft_meets_mamba",
        "test_kv_cache_planning.py::"
        "test_finalize_extensible_kv_cache_auto_max_model_len_warns_when_short",
    ),
    "the sdist's rust/ sources (the lane extracts tests/ only): the Rust client's vectors": (
        "test_prompt_block_hash_vectors.py::test_engine_matches_frontend_prompt_block_hash_vectors",
    ),
}
DESELECTED_NAMES = {name for names in DESELECTED.values() for name in names}

# Per schedkit mode, tests whose outcome may differ from stock, and why (the script
# leaves them out of the comparison and prints them). Each is a test that provokes
# something real engines do not do, never a scheduling decision schedkit gets wrong.
_CACHE_AWARE = (
    "vLLM 0.34's --cache-aware-admission-window reorders the head of waiting after"
    " order_waiting; the adapter turns it off when a policy orders the waiting queue"
    " (priority does), as the simulator does: the policy owns the order"
)
_CACHE_AWARE_TESTS = {
    f"test_scheduler.py::test_cache_aware_admission_{name}": _CACHE_AWARE
    for name in (
        "does_not_look_past_the_window",
        "is_safe_on_a_mamba_spec",
        "keeps_blocked_and_started_requests_in_place",
        "protects_resident_prefix_from_eviction",
        "skipped_below_threshold",
    )
}
KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "priority": _CACHE_AWARE_TESTS,
    "priority-on-fcfs": {
        **_CACHE_AWARE_TESTS,
        "test_deferred_block_free.py::test_allocation_retry_waits_for_fence_then_succeeds"
        "[priority-2]": "it makes allocate_slots fail with thousands of blocks free; the"
        " adapter steers victims only in steps where a running request can run out of"
        " blocks (SchedkitSchedulerMixin._may_preempt), so there vLLM's fcfs default"
        " picks the victim",
    },
}


def match(nodeid: str, names: Collection[str]) -> str | None:
    """The name in ``names`` that ``nodeid`` (``path/file.py::test[params]``) falls
    under, or None."""
    path, _, rest = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    for name in (f"{file}::{rest}", f"{file}::{rest.split('[', 1)[0]}", file):
        if name in names:
            return name
    return None


# Hub ids the scheduler tests pass to ModelConfig only to read a config.json: a local
# stand-in with the published architecture, so they run offline. Nothing is loaded.
STAND_INS: dict[str, dict[str, Any]] = {
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "ffn_dim": 3072,
        "word_embed_proj_dim": 768,
        "do_layer_norm_before": True,
        "max_position_embeddings": 2048,
        "vocab_size": 50272,
        "bos_token_id": 2,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "torch_dtype": "float16",
    },
    "facebook/opt-350m": {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "ffn_dim": 4096,
        "word_embed_proj_dim": 512,
        "do_layer_norm_before": False,
        "max_position_embeddings": 2048,
        "vocab_size": 50272,
        "bos_token_id": 2,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "torch_dtype": "float16",
    },
}
STAND_IN_REVISION = "schedkit-stand-in"
