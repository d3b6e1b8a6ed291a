"""schedkit-trtllm: a skeleton of the TensorRT-LLM adapter (docs/engines/tensorrt-llm.md).

Not an adapter yet: nothing here has run against ``tensorrt_llm``, which needs a GPU and
is not installed in this project's environments. ``SchedkitRequestScheduler`` is the
seam the design names, written against the attributes of TensorRT-LLM's Python
``LlmRequest`` and ``SimpleScheduler`` that the PyTorch executor uses, and tested with
stand-ins. ``install`` is guarded: it imports ``tensorrt_llm`` only when called.
"""

from __future__ import annotations

from schedkit_trtllm.scheduler import (
    CONTEXT_INIT,
    GENERATION_IN_PROGRESS,
    SchedkitRequestScheduler,
    install,
)

__all__ = ["CONTEXT_INIT", "GENERATION_IN_PROGRESS", "SchedkitRequestScheduler", "install"]
