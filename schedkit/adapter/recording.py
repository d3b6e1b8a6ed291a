"""Recording an engine's steps for calibration (``record_steps`` in the schedkit config).

One CSV row per step, in the columns ``schedkit calibrate`` reads
(``schedkit.records.STEP_COLUMNS``, in that order; docs/calibration.md), after
a first line ``# schedkit-steps {...}`` (``META_PREFIX``) naming the engine, model,
device and TP. Times are seconds
on the engine's clock, which starts when the recorder does. The cost per step is a few
additions when the step is scheduled, and one buffered CSV row when its results are
processed. An engine whose processes may be killed without running ``atexit`` (SGLang's
schedulers; vLLM's engine core, killed by its API server when the server stops) flushes
every row (``flush_every=1``).
"""

from __future__ import annotations

import atexit
import csv
import json
import time
from pathlib import Path
from typing import Any

from schedkit.decisions import StepReport
from schedkit.errors import SchedkitError, quote
from schedkit.records import META_PREFIX, STEP_COLUMNS
from schedkit.views import EngineView

__all__ = ["RECORDING_ENGINES", "StepRecorder"]

FLUSH_EVERY = 256  # rows
RECORDING_ENGINES = ("vllm", "sglang")  # the adapters that honour record_steps


class StepRecorder:
    """Writes the steps of one engine to ``path``.

    ``opened`` runs when a step is scheduled. It takes the KV tokens the step reads and
    its query-key pairs from the scheduled requests' computed tokens: those include the
    step's own tokens when ``computed_includes_step`` is set (vLLM counts them at
    schedule time), and exclude them otherwise. ``closed`` writes the row once the
    step's results are processed.
    """

    def __init__(
        self,
        path: str | Path,
        meta: dict[str, Any],
        *,
        computed_includes_step: bool = True,
        flush_every: int = FLUSH_EVERY,
    ) -> None:
        try:
            self._file = Path(path).open("w", newline="", encoding="utf-8")  # noqa: SIM115 (open until close)
        except OSError as exc:
            raise SchedkitError(
                f"record_steps: cannot write {quote(str(path))} ({exc.strerror or exc}); pass a"
                " file in a directory you can write to"
            ) from None
        self.path = Path(path)
        self._file.write(META_PREFIX + json.dumps(meta, sort_keys=True) + "\n")
        self._csv = csv.writer(self._file)
        self._csv.writerow(STEP_COLUMNS)
        self._includes = computed_includes_step
        self._flush_every = max(1, flush_every)
        self._open: dict[int, tuple[int, int]] = {}  # id(step key) -> (kv tokens, pairs)
        self._rows = 0
        self.t0 = time.perf_counter()
        atexit.register(self.close)

    def opened(self, key: Any, report: StepReport) -> None:
        kv = pairs = 0
        for view, n in zip(report.scheduled, report.num_scheduled_tokens, strict=False):
            computed = view.num_computed_tokens
            after = computed if self._includes else computed + n
            kv += after
            before = after - n
            pairs += n * before + n * (n + 1) // 2
        self._open[id(key)] = (kv, pairs)
        if len(self._open) > 64:  # steps the engine dropped without results
            self._open.pop(next(iter(self._open)))

    def closed(self, key: Any, report: StepReport, engine: EngineView) -> None:
        kv, pairs = self._open.pop(id(key), (0, 0))
        if report.num_prefill_tokens + report.num_decode_tokens == 0:
            return
        end = time.perf_counter() - self.t0
        self._csv.writerow((
            f"{end - report.duration_s:.6f}", f"{end:.6f}", report.num_prefill_tokens,
            report.num_decode_tokens, kv, pairs, len(report.scheduled), engine.num_running,
            engine.num_waiting, f"{report.duration_s:.9f}",
        ))  # fmt: skip
        self._rows += 1
        if self._rows % self._flush_every == 0:
            self._file.flush()

    @property
    def rows(self) -> int:
        return self._rows

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
        atexit.unregister(self.close)
