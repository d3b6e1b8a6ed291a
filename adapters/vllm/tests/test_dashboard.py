"""The Grafana dashboard against a real server: ``schedkit serve vllm`` under load, scraped
by a real Prometheus (Debian's, which ``make test`` installs for promtool), every panel's
queries evaluated and drawn (``deploy/grafana/render.py``) and the page photographed by
headless Chromium. The panels left without data are exactly those whose events did not
happen (no policy errors, no SGLang): a query naming a series that is not exported, or
misspelling one, fails here.

``SCHEDKIT_DASHBOARD_PNG=docs/dashboard.png`` keeps the picture (how docs/dashboard.png is
made).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from test_server import SCHEDKIT, _engine_args, _env, _free_port, _kill, _wait_healthy

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "deploy" / "grafana"))
import render  # noqa: E402  (deploy/grafana/render.py, not a package)

POLICY = "priority+test-echo-metadata"  # rejects 17-token prompts: the rejections panel
NO_DATA = {
    "Policy errors / s (the engine default was used)",
    "SGLang TTFT p50 / p90",
    "SGLang requests running / queued",
    "SGLang KV token usage and retractions / s",
}


def _workload(path: Path) -> None:
    lines = [json.dumps({"workload": {"name": "dashboard"}})]
    # 16 s of arrivals; 160 output tokens each (within --max-model-len 256) keep several
    # requests running at once, so the running gauge is above 0 whenever vLLM samples it
    # (with 48 the tiny model finished most requests between two samples, and the gauge
    # could read 0 at every scrape of a run)
    for i in range(160):
        prompt = 17 if i % 8 == 0 else 20 + i % 60
        lines.append(json.dumps({"arrival_s": 0.1 * i, "prompt_tokens": prompt,
                                 "output_tokens": 160, "tenant": "ab"[i % 2]}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def test_the_dashboard_drawn_from_a_real_server_and_prometheus(
    tiny_model: Path, tmp_path: Path
) -> None:
    prometheus = shutil.which("prometheus")
    assert prometheus, "no prometheus: deploy/prometheus/install-promtool.sh installs it"
    port, prom_port = _free_port(), _free_port()
    base, prom = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{prom_port}"
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs: [{job_name: vllm, static_configs:"
        f" [{{targets: ['127.0.0.1:{port}']}}]}}]\n"
    )
    server_log, prom_log = tmp_path / "server.log", tmp_path / "prometheus.log"
    with server_log.open("wb") as out:
        server = subprocess.Popen(
            [SCHEDKIT, "serve", "vllm", "--policy", POLICY, "--", *_engine_args(tiny_model, port)],
            stdout=out, stderr=subprocess.STDOUT, env=_env(), start_new_session=True,
        )  # fmt: skip
    with prom_log.open("wb") as out:
        prom_process = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(server, base, server_log)
        _wait_healthy(prom_process, prom, prom_log, path="/-/ready")
        trace = tmp_path / "trace.jsonl"
        _workload(trace)
        start = time.time()
        site = str(Path(__file__).with_name("site"))  # names the echo policy
        path = os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path}
        load = subprocess.run(
            [SCHEDKIT, "bench", "--engine", "openai", "--target", base, "--policy", POLICY,
             "--model", str(tiny_model), "--workload", str(trace), "--request-timeout-s", "120",
             "--out", str(tmp_path / "load")],
            capture_output=True, text=True, timeout=600, env={**env, "COLUMNS": "200"},
        )  # fmt: skip
        assert load.returncode == 0, load.stdout[-3000:] + load.stderr[-3000:]
        time.sleep(4)  # the last scrapes
        dashboard = json.loads(render.DASHBOARD.read_text())
        panels = render.evaluate(dashboard, prom, start - 5, time.time(), 1.0, 1.0)
    finally:
        _kill(prom_process)
        _kill(server)
    charts = [p for p in panels if p.kind != "row"]
    assert {p.title for p in charts if not p.series} == NO_DATA
    by_title = {p.title: p for p in charts}
    reasons = [name for name, _ in by_title["Rejections / s, by reason"].series]
    assert reasons and all("tenant=" in r for r in reasons), reasons  # the echo's code
    hooks = {name for name, _ in by_title["Policy decisions / s, by hook"].series}
    assert {f"{POLICY} admit_request", f"{POLICY} order_waiting"} <= hooks, hooks
    running = dict(by_title["vLLM requests running / waiting"].series)["running"]
    assert max(v for _, v in running) >= 1  # a scrape saw requests running
    ttft = by_title["vLLM TTFT p50 / p90"].series
    assert [name for name, _ in ttft] == ["p50", "p90"]
    assert all(0 < v < 120 for _, points in ttft for _, v in points)

    page = tmp_path / "dashboard.html"
    page.write_text(render.page(dashboard["title"], panels))
    png = tmp_path / "dashboard.png"
    subprocess.run(
        [sys.executable, str(render.SCREENSHOT), str(page), str(png), "--size", "1600x1400"],
        check=True, timeout=180,
    )  # fmt: skip
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    if keep := os.environ.get("SCHEDKIT_DASHBOARD_PNG"):
        shutil.copyfile(png, keep)
