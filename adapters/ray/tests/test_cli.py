"""``python -m schedkit_ray serve``: bad input is one line; a run serves and stops on
SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
import requests
from conftest import free_port

ENGINE = ["--", "--model", "Llama-3-8B", "--gpu", "H100-SXM"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "schedkit_ray", "serve", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--policy", "no-such-policy"], "no-such-policy"),
     (["--policy", "prefix-affinity", "--options", "{bad"], "not valid JSON"),
     (["--replicas", "0"], "--replicas 0"),
     (["--port", "70000"], "--port 70000"),
     (["--policy", "prefix-affinity", "--", "--gpu", "no-such-gpu"], "gpu")],
)  # fmt: skip
def test_bad_input_is_one_line(args: list[str], said: str) -> None:
    engine = [] if "--" in args else ENGINE
    done = _run(*args, *engine)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = _run("--port", str(taken.getsockname()[1]), *ENGINE)
    assert done.returncode == 2 and "cannot serve on 127.0.0.1" in done.stderr
    assert done.stderr.count("\n") == 1


def test_serves_and_stops_on_sigterm() -> None:
    port = free_port()
    command = [sys.executable, "-m", "schedkit_ray", "serve", "--replicas", "2", "--policy",
               "prefix-affinity", "--port", str(port), "--num-cpus", "2", *ENGINE]  # fmt: skip
    env = {**os.environ, "RAY_ADDRESS": ""}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"on http://127.0.0.1:{port}" in line, line
        body = {"model": "Llama-3-8B", "prompt": "hi there", "max_tokens": 2}
        answer = requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=30)
        assert answer.status_code == 200 and answer.headers["x-schedkit-replica"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert "stopping" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
