"""The model-less scheduler needs no device and no ``VLLM_TARGET_DEVICE``.

On the official CUDA wheel without a GPU, vLLM detects no platform and its default
``DeviceConfig`` fails ("Failed to infer device type"); ``build_scheduler`` then builds the
config for the CPU itself. The check runs in a fresh interpreter with the variable removed
from its environment, because vLLM resolves its platform once per process (and the
parent's may have been resolved with the variable set).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

_CHILD = r"""
import json, os
from schedkit_vllm import AsyncScheduler, Scheduler
from schedkit_vllm.harness.modelless import build_scheduler, model_runner_output
from vllm.platforms import current_platform
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request

hash_fn = get_hash_fn_by_name("sha256_cbor")
init_none_hash(hash_fn)
report = {"platform": current_platform.device_type}
for cls in (Scheduler, AsyncScheduler):
    scheduler = build_scheduler(num_blocks=32, cls=cls, schedkit={"policy": ["priority"]})
    request = Request(
        "r0", list(range(1, 41)), SamplingParams(max_tokens=2, ignore_eos=True),
        pooling_params=None, block_hasher=get_request_block_hasher(16, hash_fn),
    )
    scheduler.add_request(request)
    output = scheduler.schedule()
    update = model_runner_output(["r0"], [[7]])
    scheduler.update_from_output(output, update)
    config = scheduler.vllm_config
    report[cls.__name__] = {
        "device": config.device_config.device_type,
        "async_scheduling": config.scheduler_config.async_scheduling,
        "scheduled": dict(output.num_scheduled_tokens),
        "output_tokens": request.num_output_tokens,
    }
report["env_after"] = "VLLM_TARGET_DEVICE" in os.environ
print("REPORT " + json.dumps(report))
"""


def _run_without_target_device() -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    return report


def test_model_less_scheduler_needs_no_target_device() -> None:
    report = _run_without_target_device()
    assert report["env_after"] is False, "the adapter must not set VLLM_TARGET_DEVICE"
    platform = report["platform"]
    for name in ("Scheduler", "AsyncScheduler"):
        built = report[name]
        # vLLM's own device where it detects a platform; the CPU where it detects none.
        assert built["device"] == (platform or "cpu"), (name, report)
        assert built["scheduled"] == {"r0": 40}, (name, report)
        assert built["output_tokens"] == 1, (name, report)
    # The config says which class it is; vLLM's CPU platform turns async off regardless.
    assert report["Scheduler"]["async_scheduling"] is False
    assert report["AsyncScheduler"]["async_scheduling"] is (platform != "cpu")
