"""schedkit-sjf: shortest predicted job first, with aging.

The entry point ``sjf`` in group ``schedkit.policies`` names ``ShortestPredictedJobFirst``;
schedkit instantiates it with validated options when a config selects it.
"""

from __future__ import annotations

from schedkit_sjf.policy import ShortestPredictedJobFirst, remaining_prefill
from schedkit_sjf.predictors import (
    TENANT_KEY_CHARS,
    LearnedPredictor,
    OraclePredictor,
    OutputPredictor,
    prompt_bucket,
    tenant_key,
)

__all__ = [
    "TENANT_KEY_CHARS",
    "LearnedPredictor",
    "OraclePredictor",
    "OutputPredictor",
    "ShortestPredictedJobFirst",
    "prompt_bucket",
    "remaining_prefill",
    "tenant_key",
]
