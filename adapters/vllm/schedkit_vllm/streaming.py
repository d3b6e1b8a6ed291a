"""Rejections visible to streaming clients of vLLM's OpenAI server (``docs/trust.md``).

A request schedkit rejects ends with ``finish_reason="abort"`` and ``stop_reason=
"rejected: <reason>"`` before it produces a token. A non-streamed response carries both;
vLLM's stream generators skip an output with no text and no tokens ("chunked prefill
case"), so a streaming client would get only ``data: [DONE]``. ``install`` wraps
``completion_stream_generator`` and ``chat_completion_stream_generator``: it watches the
engine outputs the generator reads, and when one is a schedkit rejection that vLLM did not
report, it sends the final chunk vLLM would have sent (``finish_reason`` and
``stop_reason``, no text) before the next line of the stream (the usage chunk or
``[DONE]``). If a vLLM version reports the rejection itself, nothing is added.

It runs in the API server process; ``schedkit_vllm.trust.TrustMiddleware`` (which
``schedkit serve vllm`` adds) installs it when vLLM builds the app.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

__all__ = ["REJECTED", "install", "rejection_chunk"]

REJECTED = "rejected: "
_MARK = "_schedkit_rejections"
_TARGETS = (  # module, class, method, chunk object type
    (
        "vllm.entrypoints.openai.completion.serving",
        "OpenAIServingCompletion",
        "completion_stream_generator",
        "text_completion",
    ),
    (
        "vllm.entrypoints.openai.chat_completion.serving",
        "OpenAIServingChat",
        "chat_completion_stream_generator",
        "chat.completion.chunk",
    ),
)

log = logging.getLogger(__name__)


def install() -> list[str]:
    """Wrap vLLM's stream generators (once); returns the methods now wrapped. A method
    missing or changed in this vLLM is skipped with a warning: its streamed rejections
    end with ``[DONE]`` only, as in stock vLLM."""
    import importlib

    wrapped = []
    for module_name, class_name, method, object_type in _TARGETS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            original = getattr(cls, method)
            params = inspect.signature(original).parameters
        except (ImportError, AttributeError, TypeError, ValueError):
            params = inspect.Signature().parameters
        if "result_generator" not in params:
            log.warning(
                "schedkit: %s.%s.%s not found in this vLLM; streamed rejections there"
                " end with [DONE] only",
                module_name,
                class_name,
                method,
            )
            continue
        if not getattr(original, _MARK, False):
            setattr(cls, method, _wrap(original, object_type))
        wrapped.append(f"{class_name}.{method}")
    return wrapped


def rejection_chunk(head: dict[str, Any], object_type: str, index: int, reason: str) -> str:
    """The SSE line vLLM sends for a choice that finished without new text."""
    choice: dict[str, Any] = {"index": index, "logprobs": None}
    if object_type == "chat.completion.chunk":
        choice["delta"] = {}
    else:
        choice["text"] = ""
    choice.update(finish_reason="abort", stop_reason=reason)
    body = {**head, "object": object_type, "choices": [choice]}
    return f"data: {json.dumps(body)}\n\n"


def _wrap(original: Callable[..., Any], object_type: str) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    async def stream(*args: Any, **kwargs: Any) -> AsyncIterator[str]:
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        request = arguments.get("request")
        choices = getattr(request, "n", None) or 1
        pending: dict[int, str] = {}  # choice index -> "rejected: ..." not yet sent
        arguments["result_generator"] = _watch(arguments["result_generator"], pending, choices)
        head = {
            "id": arguments.get("request_id"),
            "created": arguments.get("created_time") or int(time.time()),
            "model": arguments.get("model_name"),
        }
        first = True
        async for line in original(*bound.args, **bound.kwargs):
            if first:  # the stream's own id and timestamp, for chunks we add
                head.update(_head_of(line))
                first = False
            if pending:
                for index in _finished_choices(line):
                    pending.pop(index, None)  # vLLM reported it: nothing to add
                for index, reason in sorted(pending.items()):
                    yield rejection_chunk(head, object_type, index, reason)
                pending.clear()
            yield line

    setattr(stream, _MARK, True)
    return stream


async def _watch(source: AsyncIterator[Any], pending: dict[int, str], choices: int) -> Any:
    """Pass ``source`` through, noting rejected outputs in ``pending`` by choice index.
    Completions read ``(prompt index, output)`` pairs, chat reads outputs."""
    async for item in source:
        prompt, result = item if isinstance(item, tuple) else (0, item)
        for output in getattr(result, "outputs", ()):
            reason = getattr(output, "stop_reason", None)
            if isinstance(reason, str) and reason.startswith(REJECTED):
                pending[prompt * choices + output.index] = reason
        yield item


def _data(line: str) -> dict[str, Any]:
    text = line.removeprefix("data: ").strip()
    if not text.startswith("{"):
        return {}
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _finished_choices(line: str) -> list[int]:
    choices = _data(line).get("choices") or []
    return [c.get("index", 0) for c in choices if isinstance(c, dict) and c.get("finish_reason")]


def _head_of(line: str) -> dict[str, Any]:
    body = _data(line)
    return {k: body[k] for k in ("id", "created", "model") if k in body}
