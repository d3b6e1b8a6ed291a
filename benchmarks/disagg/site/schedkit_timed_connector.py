"""vLLM's ``ExampleConnector`` (KV through files in a shared directory), timed: each
engine step's KV saves (prefill side) and loads (decode side) are appended as one JSON
line to the file ``kv_connector_extra_config.timing_file`` names::

    {"kind": "save" | "load", "seconds": ..., "requests": k, "tokens": [n, ...], "t": ...}

Selected with ``"kv_connector": "TimedExampleConnector", "kv_connector_module_path":
"schedkit_timed_connector"`` and this directory on ``PYTHONPATH``
(``benchmarks/disagg/vllm_pair.py`` does both). The transfer itself is the example
connector's, unchanged: this only reads the clock around it, in vLLM's worker process.
"""

from __future__ import annotations

import json
import time
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector


class TimedExampleConnector(ExampleConnector):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timing = self._kv_transfer_config.get_from_extra_config("timing_file", None)
        self._save_s = 0.0

    def _log(self, kind: str, seconds: float, stored: bool) -> None:
        meta = self._get_connector_metadata()
        tokens = [len(r.slot_mapping) for r in meta.requests if r.is_store == stored]
        if self._timing and tokens:
            line = {"kind": kind, "seconds": seconds, "requests": len(tokens), "tokens": tokens,
                    "t": time.time()}  # fmt: skip
            with open(self._timing, "a") as out:
                out.write(json.dumps(line) + "\n")

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        super().start_load_kv(forward_context, **kwargs)
        self._log("load", time.perf_counter() - began, stored=False)

    def save_kv_layer(
        self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any
    ) -> None:
        began = time.perf_counter()
        super().save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)
        self._save_s += time.perf_counter() - began

    def wait_for_save(self) -> None:
        super().wait_for_save()
        if self._save_s:
            self._log("save", self._save_s, stored=True)
        self._save_s = 0.0
