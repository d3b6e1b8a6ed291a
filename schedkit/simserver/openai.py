"""OpenAI request bodies read as vLLM's server reads them, and its answers' shapes.

``read_request`` turns a completions or chat body into what the simulated engine needs
(prompt token ids, tokens to generate) or a client error with vLLM's status and wording;
``chunk``, ``final`` and ``answer`` build the streamed chunks and the whole answer. A
request the policy rejects ends as the vLLM adapter ends one: ``finish_reason``
``abort`` and ``stop_reason`` ``rejected: <why>``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schedkit.simserver.clock import text_token_ids

__all__ = [
    "BadRequest",
    "Parsed",
    "answer",
    "chunk",
    "error_json",
    "read_request",
    "sse",
    "usage_chunk",
]

COMPLETIONS_MAX_TOKENS = 16  # vLLM's default for /v1/completions


class BadRequest(Exception):
    """A request the server refuses before it reaches the engine: ``status`` and message."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


@dataclass(frozen=True)
class Parsed:
    """What the engine needs of a request, and how to answer it."""

    ids: list[int]
    max_tokens: int
    chat: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    model: str
    id: str
    created: int


def error_json(status: int, message: str, kind: str = "BadRequestError") -> dict[str, Any]:
    """vLLM's error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _prompt_ids(body: Mapping[str, Any]) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return text_token_ids(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        return list(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        raise BadRequest(400, "prompt: a batch of prompts is not served here; send one per request")
    raise BadRequest(400, "prompt: give a string or a non-empty list of token ids (ints >= 0)")


def _chat_ids(body: Mapping[str, Any]) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "messages: give a non-empty list of {role, content} objects")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(400, f"messages[{i}]: give an object with a role and content")
        content = m.get("content", "")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise BadRequest(400, f"messages[{i}].content: give a string or text parts")
        parts.append(f"{m['role']}: {content}\n")
    return text_token_ids("".join(parts) + "assistant: ")


def _max_tokens(body: Mapping[str, Any], chat: bool, prompt: int, max_model_len: int) -> int:
    """vLLM's limits: ``max_completion_tokens`` (chat) or ``max_tokens``; unset, 16 for
    completions and what the context has left for chat."""
    value = body.get("max_completion_tokens") if chat else None
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        value = max_model_len - prompt if chat else COMPLETIONS_MAX_TOKENS
    elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(400, f"max_tokens must be an integer >= 1, got {json.dumps(value)}")
    if prompt + value > max_model_len:
        raise BadRequest(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you"
            f" requested {prompt + value} tokens ({prompt} in the messages, {value} in the"
            " completion). Please reduce the length of the messages or completion.",
        )
    return int(value)


def read_request(body: object, chat: bool, served: str, max_model_len: int) -> Parsed:
    """``body`` as the engine takes it, or ``BadRequest`` naming what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest(400, "the request body must be a JSON object")
    model = body.get("model")
    if model not in (None, "", served):
        raise BadRequest(404, f"The model `{model}` does not exist.", "NotFoundError")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise BadRequest(400, f"n: only 1 is served here, got {json.dumps(n)}")
    ids = _chat_ids(body) if chat else _prompt_ids(body)
    options = body.get("stream_options")
    options = options if isinstance(options, dict) else {}
    stream = body.get("stream") is True
    prefix = "chatcmpl" if chat else "cmpl"
    return Parsed(
        ids=ids,
        max_tokens=_max_tokens(body, chat, len(ids), max_model_len),
        chat=chat,
        stream=stream,
        include_usage=stream and options.get("include_usage") is True,
        continuous_usage=stream and options.get("continuous_usage_stats") is True,
        model=served,
        id=f"{prefix}-{uuid.uuid4().hex}",
        created=int(time.time()),
    )


def _usage(prompt: int, tokens: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": tokens,
        "total_tokens": prompt + tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _choice(
    p: Parsed, text: str, finish: str | None, stop: str | None, first: bool
) -> dict[str, Any]:
    if p.chat:
        delta: dict[str, Any] = {"content": text}
        if first:
            delta["role"] = "assistant"
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                "stop_reason": stop}  # fmt: skip
    return {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": stop,
    }


def token_text(count: int) -> str:
    """The text of ``count`` generated tokens: the simulator has no model, one word each."""
    return " tok" * count


def chunk(
    p: Parsed, tokens: int, new: int, finish: str | None, stop: str | None = None, cached: int = 0
) -> dict[str, Any]:
    """A streamed chunk carrying ``new`` tokens (``tokens`` so far)."""
    out: dict[str, Any] = {
        "id": p.id,
        "object": "chat.completion.chunk" if p.chat else "text_completion",
        "created": p.created,
        "model": p.model,
        "choices": [_choice(p, token_text(new), finish, stop, tokens <= new)],
    }
    if p.continuous_usage:
        out["usage"] = _usage(len(p.ids), tokens, cached)
    return out


def usage_chunk(p: Parsed, tokens: int, cached: int) -> dict[str, Any]:
    """The last chunk with ``include_usage``: no choices, the request's usage."""
    return {
        "id": p.id,
        "object": "chat.completion.chunk" if p.chat else "text_completion",
        "created": p.created,
        "model": p.model,
        "choices": [],
        "usage": _usage(len(p.ids), tokens, cached),
    }


def answer(p: Parsed, tokens: int, finish: str, stop: str | None, cached: int) -> dict[str, Any]:
    """The whole answer of a request not streamed."""
    text = token_text(tokens)
    if p.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": stop,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                  "stop_reason": stop}  # fmt: skip
    return {
        "id": p.id,
        "object": "chat.completion" if p.chat else "text_completion",
        "created": p.created,
        "model": p.model,
        "choices": [choice],
        "usage": _usage(len(p.ids), tokens, cached),
    }


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
