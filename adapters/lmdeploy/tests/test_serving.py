"""``schedkit serve lmdeploy``: the launcher, activation in spawned engine processes, and
the request carrier (``schedkit_lmdeploy.carrier``) piece by piece with LMDeploy's real
classes. LMDeploy's engine cannot run on CPU, so no server starts here:
``benchmarks/engines/lmdeploy_gpu.sh`` runs one on a GPU machine."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from schedkit import Admission, Policy, PolicyFacade, hookimpl, load_config
from schedkit.adapter.environ import resolve_config
from schedkit.errors import SchedkitError
from schedkit.testing.contract import ContractRecorder
from schedkit.trust import TrustConfig

from schedkit_lmdeploy import carrier, patches
from schedkit_lmdeploy.harness.modelless import build_scheduler
from schedkit_lmdeploy.serve import build_command, build_environ

# -- the launcher ---------------------------------------------------------------------------


def test_the_command_runs_lmdeploys_cli_on_the_pytorch_engine() -> None:
    command = build_command(["serve", "api_server", "m"], python="py")
    assert command == ["py", "-m", "schedkit_lmdeploy.launch", "serve", "api_server", "m",
                       "--backend", "pytorch"]  # fmt: skip
    kept = build_command(["serve", "api_server", "m", "--backend=pytorch"], python="py")
    assert kept.count("--backend=pytorch") == 1 and "--backend" not in kept


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["serve", "api_server", "m", "--backend", "turbomind"], "--backend turbomind"),
        (["serve", "api_server", "m", "--mp-engine-backend", "ray"], "--mp-engine-backend"),
        ([], "after --"),
    ],
)
def test_what_schedkit_cannot_run_in_is_refused(args: list[str], named: str) -> None:
    with pytest.raises(SchedkitError, match=named):
        build_command(args)


def test_the_environment_carries_the_config_and_refuses_another() -> None:
    config = load_config({"policy": ["slo", "vtc"]})
    env = build_environ(config, {"HOME": "/h"})
    assert env["HOME"] == "/h" and resolve_config(env) == config
    with pytest.raises(SchedkitError, match="already selects"):
        build_environ(config, {"SCHEDKIT_POLICY": "fcfs"})


PROBE = """
import json, sys
import torch.multiprocessing as mp
import schedkit_lmdeploy.launch  # what `python -m schedkit_lmdeploy.launch` imports


def child(queue):  # as LMDeploy's ZMQMPEngine._mp_proc: a fresh spawned interpreter
    from schedkit_lmdeploy.harness.modelless import build_scheduler
    runtime = getattr(build_scheduler(16, 32, 4, 256), "schedkit", None)
    queue.put(None if runtime is None else runtime.facade.label)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    label = queue.get(timeout=120)
    process.join()
    print(json.dumps({"parent": schedkit_lmdeploy.launch.ACTIVE, "child": label}))
"""


@pytest.mark.parametrize("policy", ["priority+lfu", None])
def test_the_policy_is_active_in_the_spawned_engine_process(
    tmp_path: Path, policy: str | None
) -> None:
    (tmp_path / "probe_main.py").write_text(textwrap.dedent(PROBE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    if policy is not None:
        env["SCHEDKIT_POLICY"] = policy
    done = subprocess.run(
        [sys.executable, "-m", "probe_main"], capture_output=True, text=True, env=env,
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"parent": policy is not None, "child": policy}


# -- the carrier: api_server side --------------------------------------------------------------


def test_the_request_body_carries_schedkit_to_the_generation_config() -> None:
    carrier.install_api(TrustConfig())
    from lmdeploy.serve.core import generation_config
    from lmdeploy.serve.openai import protocol
    from lmdeploy.serve.openai.endpoints import common

    assert common.build_generation_config is generation_config.build_generation_config
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "schedkit": {"tenant": "gold", "priority": 2, "slo_ttft_ms": 300}}  # fmt: skip
    request = protocol.ChatCompletionRequest(**body)
    config = common.build_serving_generation_config(request, SimpleNamespace(default_gen_config={}))
    assert config.schedkit == body["schedkit"]
    again = pickle.loads(pickle.dumps(config))  # as LMDeploy sends it to its engine process
    assert again.schedkit == body["schedkit"]
    plain = protocol.CompletionRequest(model="m", prompt="hi")
    assert not hasattr(generation_config.build_generation_config(plain, {}), "schedkit")


def test_the_server_app_gets_the_trust_middleware() -> None:
    carrier.install_api(TrustConfig())
    from fastapi import FastAPI
    from lmdeploy.serve.openai import api_server
    from schedkit.edge import TrustMiddleware

    app = FastAPI()
    api_server.mount_metrics(app, SimpleNamespace(enable_metrics=False))
    api_server.mount_metrics(app, SimpleNamespace(enable_metrics=False))
    assert [m.cls for m in app.user_middleware] == [TrustMiddleware]


def test_the_operator_decides_what_the_body_may_claim() -> None:
    body: dict[str, Any] = {"schedkit": {"tenant": "gold", "priority": -5, "slo_ttft_ms": 9}}
    assert carrier.rewrite(TrustConfig(), None, body) == []
    assert body["schedkit"] == {"tenant": "default"}  # nothing trusted from the body
    body = {"schedkit": {"tenant": "gold", "priority": -5}}
    trusted = TrustConfig(tenant_from_body=True, priority_from_body=True)
    assert carrier.rewrite(trusted, None, body) == []
    assert body["schedkit"] == {"tenant": "gold", "priority": -5}
    body = {"schedkit": {"tenant": "gold"}}
    assert carrier.rewrite(trusted, "team-a", body) == []  # the header wins
    assert body["schedkit"] == {"tenant": "team-a"}
    header = TrustConfig()
    body = {"messages": []}
    assert carrier.rewrite(header, "team-a", body) == []
    assert body["schedkit"] == {"tenant": "team-a"}
    problems = carrier.rewrite(TrustConfig(slo_from_body=True), None,
                               {"schedkit": {"slo_ttft_ms": -1}})  # fmt: skip
    assert problems and "slo_ttft_ms" in problems[0].field
    assert carrier.rewrite(TrustConfig(), None, {"schedkit": "gold"})[0].field == "schedkit"


# -- the carrier: engine side -----------------------------------------------------------------


class NoBad(Policy):
    @hookimpl
    def admit_request(self, request: Any) -> Admission | None:
        return Admission.reject("tenant bad is closed") if request.tenant == "bad" else None


def engine_for(recorder: ContractRecorder) -> tuple[Any, list[tuple[Any, Any, str]]]:
    """An object with what ``Engine._add_message`` reads, over a real Scheduler."""
    carrier.install_engine()
    from lmdeploy.pytorch.disagg.config import EngineRole

    scheduler = build_scheduler(64, 32, 4, 256)
    trust = TrustConfig(tenant_from_body=True)
    patches.install(scheduler, PolicyFacade([("no-bad", NoBad()), ("rec", recorder)]), trust)
    answers: list[tuple[Any, Any, str]] = []
    engine = SimpleNamespace(
        scheduler=scheduler,
        engine_config=SimpleNamespace(role=EngineRole.Hybrid),
        max_session_len=4096,
        migration_event=SimpleNamespace(set=lambda: None),
        _response=lambda resp, kind, data=None, err_msg="": answers.append((resp, kind, err_msg)),
    )
    return engine, answers


def message(session_id: int, tenant: str, tokens: int = 40) -> Any:
    from lmdeploy.messages import GenerationConfig
    from lmdeploy.pytorch.messages import SamplingParam

    config = GenerationConfig(max_new_tokens=8)
    config.schedkit = {"tenant": tenant, "request_id": f"r{session_id}-{tenant}"}  # type: ignore[attr-defined]
    data = {"session_id": session_id, "token_ids": np.arange(tokens), "adapter_name": None,
            "sampling_param": SamplingParam.from_gen_config(config)}  # fmt: skip
    return SimpleNamespace(data=data, resp=object())


def test_a_rejected_request_is_answered_at_once_and_finishes_rejected() -> None:
    from lmdeploy.messages import ResponseType
    from lmdeploy.pytorch.engine.engine import Engine

    recorder = ContractRecorder()
    engine, answers = engine_for(recorder)
    scheduler = engine.scheduler
    for sid in (1, 2):
        scheduler.add_session(sid)
    good, bad = message(1, "gold"), message(2, "bad")
    Engine._add_message(engine, [good, bad])
    assert answers == [(bad.resp, ResponseType.CANCEL, "rejected: tenant bad is closed")]
    assert scheduler.num_waiting() == 1  # the rejected one never waits
    scheduler.end_session(2)  # the client's end once it has its answer
    assert recorder.finished == {"r2-bad": ["rejected"]}
    seq = next(iter(scheduler.sessions[1].sequences.values()))
    assert scheduler.schedkit.view(seq).tenant == "gold"


def test_a_sessions_next_turn_is_a_new_request() -> None:
    from lmdeploy.pytorch.engine.engine import Engine

    recorder = ContractRecorder()
    engine, _ = engine_for(recorder)
    scheduler = engine.scheduler
    scheduler.add_session(5)
    Engine._add_message(engine, [message(5, "gold")])
    seq = next(iter(scheduler.sessions[5].sequences.values()))
    seq.state.stop()  # the first turn ended (its outputs went out)
    Engine._add_message(engine, [message(5, "silver", tokens=12)])
    assert dict(recorder.arrived) == {"r5-gold": 1, "r5-silver": 1}
    assert list(recorder.finished) == ["r5-gold"]
    view = scheduler.schedkit.view(seq)
    assert (view.request_id, view.tenant, view.num_prompt_tokens) == ("r5-silver", "silver", 52)


def test_ending_a_session_that_keeps_its_cache_finishes_its_turn() -> None:
    from lmdeploy.pytorch.engine.engine import Engine

    recorder = ContractRecorder()
    engine, _ = engine_for(recorder)
    scheduler = engine.scheduler
    scheduler.add_session(4)
    req = message(4, "gold")
    Engine._add_message(engine, [req])
    seq = next(iter(scheduler.sessions[4].sequences.values()))
    seq.preserve_cache = True
    scheduler.activate_seqs(scheduler.schedule(is_prefill=True).running)  # it runs
    end = SimpleNamespace(data={"session_id": 4, "response": False}, resp=object())
    Engine._on_end_session(engine, [end])
    assert recorder.finished == {"r4-gold": ["aborted"]}  # no token yet: it did not finish
    assert 4 in scheduler.sessions  # LMDeploy keeps the session and its cache
