"""Start a real in-process SGLang engine (scheduler in a spawned process) with a schedkit
config, and read what it did."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from schedkit.testing.models import tiny_llama

from schedkit_sglang import cpu
from schedkit_sglang.config import CONFIG_VAR, OPTIONS_VAR, POLICY_VAR, scoped_environ

SITE = Path(__file__).with_name("site")  # the test policies, importable by entry point
# Spawned SGLang processes take sys.path from this process (multiprocessing's spawn),
# not from PYTHONPATH, so the test policies must be importable here too.
if str(SITE) not in sys.path:
    sys.path.append(str(SITE))

CPU_ENGINE = {**cpu.ENGINE_ARGS, "skip_tokenizer_init": True, "log_level": "warning"}
environ = scoped_environ


@contextlib.contextmanager
def engine(
    model_dir: Path,
    policy: str | None = None,
    options: Mapping[str, Any] | None = None,
    extra_env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> Iterator[Any]:
    """An ``sglang.Engine`` whose scheduler runs ``policy`` (None: no schedkit config)."""
    import sglang

    env: dict[str, str | None] = {
        CONFIG_VAR: None,
        POLICY_VAR: policy,
        OPTIONS_VAR: json.dumps(options) if options else None,
        **(extra_env or {}),
    }
    settings = {**CPU_ENGINE, "max_total_tokens": 4096, **kwargs}
    with environ(env):
        llm = sglang.Engine(model_path=str(model_dir), **settings)
    try:
        yield llm
    finally:
        llm.shutdown()


def tiny_model(path: Path, *, word_tokenizer: bool = False) -> Path:
    """Save a tiny random-weight Llama (2 layers, hidden 64, vocab 2048) in ``path``
    (``schedkit.testing.models.tiny_llama``). Without ``word_tokenizer`` it has no
    tokenizer: start SGLang on it with ``skip_tokenizer_init`` and send token ids."""
    return tiny_llama(path, word_tokenizer=word_tokenizer)


def prompt(i: int, length: int) -> list[int]:
    """A prompt of ``length`` token ids, distinct for each ``i``."""
    return [(i * 131 + j * 7) % 2000 + 1 for j in range(length)]


def finish_order(outputs: list[dict[str, Any]]) -> list[int]:
    """Indices of ``outputs`` in the order their requests finished."""
    return sorted(
        range(len(outputs)), key=lambda i: outputs[i]["meta_info"]["response_sent_to_client_ts"]
    )


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def generate_each(llm: Any, requests: list[dict[str, Any]], head_start: float = 0.0) -> list[Any]:
    """Submit each request (``generate`` keyword arguments, e.g. its own ``priority``)
    concurrently, the first one ``head_start`` seconds before the others, and wait for
    all. A request SGLang refuses gives its exception in place of the output."""
    import asyncio

    async def run() -> list[Any]:
        first = asyncio.ensure_future(llm.async_generate(**requests[0]))
        await asyncio.sleep(head_start)
        rest = await asyncio.gather(
            *(llm.async_generate(**r) for r in requests[1:]), return_exceptions=True
        )
        done = await asyncio.gather(first, return_exceptions=True)
        return [*done, *rest]

    return llm.loop.run_until_complete(run())  # type: ignore[no-any-return]
