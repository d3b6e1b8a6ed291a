"""``schedkit serve sim``: the simulated engine behind vLLM's OpenAI API, advancing in
wall-clock time, for fleet and router tests without GPUs (docs/serve-sim.md).

- ``clock``: the simulator driven by the wall clock (``WallClockEngine``).
- ``openai``: request bodies read as vLLM reads them; answers in its shapes.
- ``server``: ``SimServer``, one replica: requests in, streams out, gauges, HTTP routes.
- ``metrics``: its ``/metrics``; ``settings``: its arguments; ``launch``: the command.
"""

from __future__ import annotations

from schedkit.simserver.server import SimServer

__all__ = ["SimServer"]
