"""A real vLLM 0.32 CPU prefill/decode pair against the simulator's model of it (issue #42).

One short trace (the first ``--num-prompts`` requests of the Azure conversation trace at
``--rate-scale``) is replayed four ways, with one policy composition everywhere
(``--policy``, default ``least-loaded+sjf``: the router's choice from the first, the
schedulers' from the second):

1. **real, aggregated**: one ``schedkit serve vllm`` server on core 0 (``--record-steps``).
   Before the test it serves a warm-up and a training trace (the next 120 requests of the
   same trace); its steps on the training trace are the cost profile
   (``schedkit calibrate``).
2. **real, disaggregated**: a prefill server (core 0) and a decode server (core 1)
   joined by vLLM's ``ExampleConnector`` (``site/schedkit_timed_connector.py``: the same
   connector, timed), ``python -m schedkit.edge.pd`` in front; the replay goes through
   the proxy (``schedkit bench --engine openai --target PROXY``).
3. **simulated, aggregated** and 4. **simulated, disaggregated**
   (``prefill_replicas=1,decode_replicas=1``): ``schedkit bench --engine sim`` with the
   profile, the real engines' KV capacity and settings, and ``kv_link=GBS:MS`` fitted to
   the connector's measured save and load times.

Every command is printed and kept in the JSON (``--json``); ``--table F.json`` reprints
a finished run's tables. Run from the repository root in ``.venv-vllm``::

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/disagg/vllm_pair.py \\
        --json benchmarks/disagg/vllm-pair.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from schedkit.sim.cost.profiles import get_model, register_model_dir
from schedkit.testing.models import tiny_llama
from schedkit.workload.loader import load_workload

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(__file__).with_name("site")
BIN = Path(sys.executable).parent
TRAIN = 120  # requests after the test's, for the profile
BLOCK = 32
# max_num_batched_tokens >= max_model_len: the ExampleConnector cannot move a chunked prefill
ENGINE = {"max_model_len": 4608, "max_num_seqs": 32, "max_num_batched_tokens": 4608}
# a random-weight 43M-parameter Llama ("mid" of benchmarks/fidelity/loop.py), with the
# positions the trace's longest request needs
MODEL = {"hidden_size": 768, "intermediate_size": 2048, "num_attention_heads": 12,
         "num_key_value_heads": 12, "num_hidden_layers": 6, "vocab_size": 512,
         "max_position_embeddings": ENGINE["max_model_len"]}  # fmt: skip
METRICS = [(m, q) for m in ("ttft_ms", "tpot_ms", "e2e_ms") for q in ("p50", "p90")]
ARMS = ("real aggregated", "sim aggregated", "real pd", "sim pd", "sim pd, the pair's own steps")


def run(command: list[str], log: list[list[str]], **kwargs: Any) -> None:
    """Run ``command`` (kept in ``log``), failing loudly with its output's tail."""
    shown = [str(c) for c in command]
    log.append(shown)
    print("$", " ".join(shown), flush=True)
    proc = subprocess.run(shown, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(shown)}\n{proc.stdout[-3000:]}"
                 f"\n{proc.stderr[-3000:]}")  # fmt: skip


# -- the machine's other work -------------------------------------------------------


def cpu_seconds(proxy: int | None = None) -> dict[str, float]:
    """CPU seconds so far: the machine's (``busy``), and this script's process tree's by
    what each process does: the engines' model workers and engine cores (vLLM's process
    names), the proxy (``proxy``: its pid), the API servers (the servers' other
    processes), and the client (this script and the bench commands it ran)."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    found = {"busy": (sum(map(int, fields)) - int(fields[3]) - int(fields[4])) / tick}
    parents, names, times = {}, {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry.name)
            parents[pid], names[pid] = int(stat[1]), comm
            times[pid] = sum(int(x) for x in stat[11:15]) / tick  # utime, stime, cu, cs
    me = os.getpid()
    found["client"] = times.get(me, 0.0)
    frontier = [(child, "") for child, parent in parents.items() if parent == me]
    while frontier:
        pid, group = frontier.pop()
        if not group:  # a child of this script: a server, the proxy or a bench command
            group = "proxy" if pid == proxy else "API servers" if _serves(pid) else "client"
        mine = group
        if "Worker" in names[pid]:
            mine = "model workers"
        elif "EngineCor" in names[pid]:
            mine = "engine cores"
        found[mine] = found.get(mine, 0.0) + times[pid]
        frontier += [(child, group) for child, parent in parents.items() if parent == pid]
    return found


def _serves(pid: int) -> bool:
    try:
        return b"serve\x00vllm" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class Cpu:
    """Where the machine's CPU went while each replay ran: per phase, each group's
    CPU seconds over the replay's wall time (1.0: one core's worth), and the other
    processes' (another job on a shared machine slows every engine here)."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, float]] = {}

    def replay(self, name: str, proxy: int | None, *args: Any) -> dict[str, Any]:
        """``replay(*args)``, measured."""
        began, t0 = cpu_seconds(proxy), time.monotonic()
        result = replay(*args)
        ended, wall = cpu_seconds(proxy), time.monotonic() - t0
        used = {k: (v - began.get(k, 0.0)) / wall for k, v in ended.items() if k != "busy"}
        used["other processes"] = max(
            0.0, (ended["busy"] - began["busy"]) / wall - sum(used.values())
        )
        self.phases[name] = {"wall_s": wall, "cores": float(os.cpu_count() or 1), **used}
        return result


CPU = Cpu()


# -- the inputs --------------------------------------------------------------------


def write_traces(out: Path, n: int) -> tuple[Path, Path, float]:
    """The test trace (the first ``n`` requests) and the training trace (the next
    ``TRAIN``), as schedkit JSONL, each starting at 0 s; and the longest gap between two
    arrivals in either (at rate scale 1)."""
    requests = load_workload("azure-conv", max_requests=n + TRAIN).requests
    paths, gap = [], 0.0
    for name, part in (("test", requests[:n]), ("train", requests[n:])):
        path = out / f"azure-conv-{name}.jsonl"
        start = part[0].arrival_s
        lines = [json.dumps({"workload": {"name": f"azure-conv-{name}",
                                          "source": "Azure LLM inference trace 2023, CC-BY 4.0"}})]  # fmt: skip
        for r in part:
            lines.append(json.dumps({"arrival_s": round(r.arrival_s - start, 6),
                                     "prompt_tokens": r.prompt_tokens,
                                     "output_tokens": r.output_tokens}))  # fmt: skip
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
        gap = max(gap, max(b.arrival_s - a.arrival_s for a, b in itertools.pairwise(part)))
    return paths[0], paths[1], gap


PROBE = (100, 500, 1500, 3000)  # prompt lengths, one request at a time (none 32k+1)


def write_probe(out: Path) -> Path:
    """Requests far enough apart that each finds the engines idle: the fixed costs."""
    path = out / "probe.jsonl"
    rows = [{"arrival_s": 4.0 * i, "prompt_tokens": n, "output_tokens": 4}
            for i, n in enumerate(PROBE)]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def engine_args(model: Path, port: int) -> list[str]:
    args = ["--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "bfloat16", "--enforce-eager", "--block-size", str(BLOCK)]  # fmt: skip
    for key, value in ENGINE.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return args


# -- the servers -------------------------------------------------------------------


class Server:
    """A process in its own session, killed with its group; its output in ``log``."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], out: Path,
                 log: list[list[str]]) -> None:  # fmt: skip
        self.name, self.log_path = name, out / f"{name}.log"
        log.append([f"{k}={v}" for k, v in env.items() if k.startswith(("VLLM_", "PYTHONPATH"))]
                   + command)  # fmt: skip
        print("$", name, ":", " ".join(command), flush=True)
        with self.log_path.open("wb") as f:
            self.process = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT,
                                            env={**os.environ, **env}, start_new_session=True)  # fmt: skip

    def wait(self, url: str, timeout_s: float = 600) -> float:
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            if self.process.poll() is not None:
                sys.exit(f"{self.name} exited:\n{self.log_path.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    return time.monotonic() - began
            except OSError:
                time.sleep(0.5)
        sys.exit(f"{self.name} not up after {timeout_s} s:\n{self.log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
                self.process.wait(timeout=wait_s)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


def vllm_server(name: str, model: Path, port: int, cpu: str, policy: str, out: Path,
                log: list[list[str]], extra: list[str] = ()) -> Server:  # type: ignore[assignment]  # fmt: skip
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": cpu, "PYTHONPATH": str(SITE)}  # fmt: skip
    command = [str(BIN / "schedkit"), "serve", "vllm", "--policy", policy, "--record-steps",
               str(out / f"{name}-steps.csv"), "--", *engine_args(model, port), *extra]  # fmt: skip
    return Server(name, command, env, out, log)


def warm_up(url: str, model: Path, seed: int) -> None:
    """Five requests the test does not send (other prompts), one after another."""
    rng = np.random.default_rng(seed)
    for n in (200, 700, 1500, 90, 3000):
        body = {"model": str(model), "prompt": rng.integers(3, 500, n).tolist(),
                "max_tokens": 16, "ignore_eos": True}  # fmt: skip
        request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()


def first_token_ms(url: str, model: Path, prompt: list[int]) -> float:
    """A streamed request's time to its first token, as a client sees it."""
    body = {"model": str(model), "prompt": prompt, "max_tokens": 4, "ignore_eos": True,
            "stream": True}  # fmt: skip
    request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        for line in response:
            if line.startswith(b"data: {"):
                ttft = (time.perf_counter() - began) * 1e3
                response.read()
                return ttft
    raise SystemExit(f"{url}: no token streamed")


def idle_probes(url: str, model: Path, proxy: bool, timing: Path | None) -> dict[str, Any]:
    """One request at a time (``PROBE`` prompt lengths, fresh prompts, 1 s apart): TTFT,
    and through the proxy its prefill leg (the proxy's own count) and the connector's save
    and load times for it."""
    rng = np.random.default_rng(7 if proxy else 8)
    found: dict[str, Any] = {}
    for n in PROBE:
        time.sleep(1.0)
        before = proxy_metrics(url) if proxy else {}
        lines = len(timing.read_text().splitlines()) if timing else 0
        row: dict[str, float] = {
            "ttft_ms": first_token_ms(url, model, rng.integers(3, 500, n).tolist())
        }
        if proxy and timing:
            after = proxy_metrics(url)
            key = next(k for k in after if k.startswith("schedkit_pd_prefill_seconds_total"))
            row["prefill_leg_ms"] = (after[key] - before.get(key, 0.0)) * 1e3
            for line in timing.read_text().splitlines()[lines:]:
                entry = json.loads(line)
                row[f"{entry['kind']}_ms"] = (
                    row.get(f"{entry['kind']}_ms", 0.0) + entry["seconds"] * 1e3
                )
        found[str(n)] = row
    return found


def replay(url: str, trace: Path, model: Path, policy: str, rate: float, out: Path,
           log: list[list[str]]) -> dict[str, Any]:  # fmt: skip
    run([BIN / "schedkit", "bench", "--engine", "openai", "--target", url, "--policy", policy,
         "--model", model, "--workload", trace, "--rate-scale", rate, "--block-size", BLOCK,
         "--request-timeout-s", 600, "--out", out, "--overwrite"], log)  # fmt: skip
    return dict(json.loads((out / "results.json").read_text()))


def kv_blocks(url: str) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("vllm:cache_config_info"):
                return int(line.split('num_gpu_blocks="')[1].split('"')[0])
    raise SystemExit("no vllm:cache_config_info on /metrics")


def proxy_metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        page = response.read().decode()
    found: dict[str, float] = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


# -- the steps and the link --------------------------------------------------------


def after_idle(steps: Path, idle_s: float, out: Path, skip: int = 1) -> Path:
    """The rows of ``steps`` after its ``skip``-th idle gap of ``idle_s`` or more (the
    warm-up, then the training trace, end with one), up to the next such gap."""
    lines = steps.read_text().splitlines()
    header, rows = lines[:2], list(csv.DictReader(lines[1:]))
    cut, kept, previous = 0, [], None
    for row in rows:
        start = float(row["start_s"])
        if previous is not None and start - previous >= idle_s:
            cut += 1
        previous = float(row["end_s"])
        if cut == skip:
            kept.append(row)
    path = out / f"{steps.stem}-part{skip}.csv"
    with path.open("w", newline="") as f:
        f.write("\n".join(header[:1]) + "\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    return path


def fit_link(timing: Path, since: float, bytes_per_token: int) -> dict[str, Any]:
    """``kv_link`` from the connector's saves and loads after ``since`` (wall clock):
    per kind, seconds = a x transfers + b x tokens by least squares; the link's fixed
    cost is the two kinds' ``a`` summed, its bandwidth the inverse of their ``b``."""
    rows = [json.loads(line) for line in timing.read_text().splitlines()]
    rows = [r for r in rows if r["t"] >= since]
    fitted: dict[str, Any] = {}
    for kind in ("save", "load"):
        mine = [r for r in rows if r["kind"] == kind]
        x = np.array([[r["requests"], sum(r["tokens"])] for r in mine], dtype=float)
        y = np.array([r["seconds"] for r in mine])
        (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
        per_request = [r["seconds"] / r["requests"] for r in mine]
        fitted[kind] = {"steps": len(mine), "transfers": int(x[:, 0].sum()),
                        "tokens": int(x[:, 1].sum()), "seconds": float(y.sum()),
                        "fixed_ms": float(max(a, 0.0) * 1e3), "us_per_token": float(b * 1e6),
                        "p50_ms_per_transfer": float(np.median(per_request) * 1e3)}  # fmt: skip
    ms = fitted["save"]["fixed_ms"] + fitted["load"]["fixed_ms"]
    per_token_s = (fitted["save"]["us_per_token"] + fitted["load"]["us_per_token"]) / 1e6
    gbs = bytes_per_token / per_token_s / 1e9
    fitted.update(kv_link=f"{gbs:.4g}:{ms:.4g}", gbs=gbs, ms=ms, bytes_per_token=bytes_per_token)
    return fitted


# -- the four arms -----------------------------------------------------------------


def aggregated(a: argparse.Namespace, model: Path, paths: tuple[Path, Path], idle_s: float,
               out: Path, log: list[list[str]]) -> tuple[dict[str, Any], Path, int, dict[str, Any]]:  # fmt: skip
    """The real aggregated arm, and the profile fitted on the same server's training steps."""
    test, train = paths
    server = vllm_server("aggregated", model, a.port, "0", a.policy, out, log)
    url = f"http://127.0.0.1:{a.port}"
    try:
        print(f"aggregated server up in {server.wait(url):.0f} s", flush=True)
        warm_up(url, model, 1)
        time.sleep(idle_s + 2)
        CPU.replay(
            "train", None, url, train, model, a.policy, a.rate_scale, out / "real-train", log
        )
        time.sleep(idle_s + 2)
        real = CPU.replay("real aggregated", None, url, test, model, a.policy, a.rate_scale,
                               out / "real-aggregated", log)  # fmt: skip
        probes = idle_probes(url, model, False, None)
        blocks = kv_blocks(url)
    finally:
        server.stop()
    steps = after_idle(out / "aggregated-steps.csv", idle_s, out)
    profile = out / "cpu-profile.json"
    run([BIN / "schedkit", "calibrate", steps, "--out", profile, "--model", model], log)
    return real, profile, blocks, probes


def disaggregated(a: argparse.Namespace, model: Path, test: Path, idle_s: float, out: Path,
                  log: list[list[str]]) -> tuple[dict[str, Any], Path, float, dict[str, float], dict[str, Any]]:  # fmt: skip
    """The real pair behind the proxy; the connector's timing file, the test's start (wall
    clock) and the proxy's counts during the test."""
    storage, timing = out / "kv", out / "connector-timing.jsonl"
    storage.mkdir()
    ports = {"prefill": a.port + 1, "decode": a.port + 2, "proxy": a.port + 3}
    servers = []
    for name, role, cpu in (("prefill", "kv_producer", "0"), ("decode", "kv_consumer", "1")):
        config = {"kv_connector": "TimedExampleConnector", "kv_role": role,
                  "kv_connector_module_path": "schedkit_timed_connector",
                  "kv_connector_extra_config": {"shared_storage_path": str(storage),
                                                "timing_file": str(timing)}}  # fmt: skip
        servers.append(vllm_server(name, model, ports[name], cpu, a.policy, out, log,
                                   ["--kv-transfer-config", json.dumps(config)]))  # fmt: skip
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    try:
        for server in servers:
            print(f"{server.name} server up in {server.wait(url[server.name]):.0f} s", flush=True)
        servers.append(Server("proxy", [sys.executable, "-m", "schedkit.edge.pd", "--policy",
                                        a.policy, "--prefill", url["prefill"], "--decode",
                                        url["decode"], "--port", str(ports["proxy"])],
                              {}, out, log))  # fmt: skip
        servers[-1].wait(url["proxy"])
        warm_up(url["proxy"], model, 2)
        time.sleep(idle_s + 2)
        since, before = time.time(), proxy_metrics(url["proxy"])
        proxy = servers[-1].process.pid
        real = CPU.replay("real pd", proxy, url["proxy"], test, model, a.policy, a.rate_scale,
                               out / "real-pd", log)  # fmt: skip
        counts = {k: v - before.get(k, 0.0) for k, v in proxy_metrics(url["proxy"]).items()}
        probes = idle_probes(url["proxy"], model, True, timing)
    finally:
        for server in reversed(servers):
            server.stop()
    return real, timing, since, counts, probes


def own_steps_profile(out: Path, idle_s: float, log: list[list[str]]) -> Path:
    """A profile fitted on the pair's own steps (both servers' test steps together: the
    prefill server's give the prefill terms, the decode server's the decode terms), the
    connector's saves and loads inside them, as they ran on this machine."""
    rows = []
    for name in ("prefill", "decode"):
        lines = after_idle(out / f"{name}-steps.csv", idle_s, out).read_text().splitlines()
        rows += lines[2:]
    merged = out / "pair-steps.csv"
    merged.write_text("\n".join(lines[:2] + rows) + "\n")
    profile = out / "pair-profile.json"
    run([BIN / "schedkit", "calibrate", merged, "--out", profile, "--model", out / "model"], log)
    return profile


def simulate(a: argparse.Namespace, model: Path, trace: Path, rate: float, profile: Path,
             blocks: int, link: str, own: Path, out: Path, log: list[list[str]]) -> dict[str, Any]:  # fmt: skip
    """The simulator's aggregated arm, its pair (``kv_link=link``), and its pair with the
    real pair's own steps (``own``: the transfer is in them, so the link costs nothing)."""
    pair = f"policy={a.policy},prefill_replicas=1,decode_replicas=1"
    run([BIN / "schedkit", "bench", "--engine", "sim", "--workload", trace, "--model", model,
         "--profile", profile, "--policy", a.policy, "--arm", f"name=pd,{pair},kv_link={link}",
         "--arm", f"name=pd-own-steps,{pair},kv_link=1000:0,profile={own}", "--rate-scale", rate,
         "--block-size", BLOCK, "--num-gpu-blocks-override", blocks,
         "--max-num-seqs", ENGINE["max_num_seqs"],
         "--max-num-batched-tokens", ENGINE["max_num_batched_tokens"],
         "--out", out, "--overwrite"], log)  # fmt: skip
    return dict(json.loads((out / "results.json").read_text()))


# -- what they say -----------------------------------------------------------------


def step_bias(profile: Path, steps: Path) -> dict[str, Any]:
    """How the profile predicts ``steps`` (another server's, not fitted on), per step
    kind: total predicted / measured time, with the engine's time between busy steps
    counted as the fit counts it."""
    from schedkit.sim.cost.calibration import load_cost_profile, read_steps
    from schedkit.sim.cost.fit import step_kind, with_gaps

    model = load_cost_profile(profile)
    rows = with_gaps(read_steps(steps)[0])[0]
    found = {}
    for kind in ("prefill", "decode", "mixed", "all"):
        mine = [r for r in rows if kind == "all" or step_kind(r) == kind]
        if mine:
            predicted = sum(model.step_time(r.prefill_tokens, r.decode_tokens, r.kv_tokens,
                                            r.attn_pairs) for r in mine)  # fmt: skip
            measured = sum(r.seconds for r in mine)
            found[kind] = {"steps": len(mine), "measured_s": measured,
                           "predicted_over_measured": predicted / measured}  # fmt: skip
    return found


def ttfts(path: Path, arm: str | None = None) -> dict[str, tuple[int, float]]:
    """request id -> (prompt tokens, TTFT ms) of a bench's requests.csv (one arm's)."""
    with path.open() as f:
        return {r["request_id"]: (int(r["prompt_tokens"]), float(r["ttft_ms"]))
                for r in csv.DictReader(f) if (arm is None or r["arm"] == arm) and r["ttft_ms"]}  # fmt: skip


def per_request(out: Path) -> dict[str, dict[str, float]]:
    """Per kind, the sim's TTFT minus the real one, request by request: p10, p50, p90 ms."""
    found = {}
    kinds = (("aggregated", "aggregated"), ("pd", "pd"), ("pd", "pd, the pair's own steps"))
    for (kind, name), arm in zip(kinds, _arms(out / "sim"), strict=True):
        sim = ttfts(out / "sim" / "requests.csv", arm)
        mine = ttfts(out / f"real-{kind}" / "requests.csv")
        gaps = [sim[k][1] - v[1] for k, v in mine.items() if k in sim]
        p10, p50, p90 = np.percentile(gaps, [10, 50, 90])
        found[name] = {"p10": float(p10), "p50": float(p50), "p90": float(p90), "n": len(gaps)}
    return found


def _arms(out: Path) -> list[str]:
    return [arm["policy"] for arm in json.loads((out / "results.json").read_text())["arms"]]


def probe(out: Path, real_agg: dict[str, Any], real_pd: dict[str, Any]) -> dict[str, Any]:
    """The idle probes: per prompt length, TTFT on each of the four, and the real pair's
    prefill leg and connector times."""
    agg, pd, _ = _arms(out / "sim-probe")
    sim = {"sim aggregated": ttfts(out / "sim-probe" / "requests.csv", agg),
           "sim pd": ttfts(out / "sim-probe" / "requests.csv", pd)}  # fmt: skip
    found: dict[str, Any] = {
        "real aggregated": {n: r["ttft_ms"] for n, r in real_agg.items()},
        "sim aggregated": {str(n): ms for n, ms in sim["sim aggregated"].values()},
        "real pd": {n: r["ttft_ms"] for n, r in real_pd.items()},
        "sim pd": {str(n): ms for n, ms in sim["sim pd"].values()},
    }
    for part in ("prefill_leg_ms", "save_ms", "load_ms"):
        found[f"real pd: {part}"] = {n: r.get(part, 0.0) for n, r in real_pd.items()}
    return found


def figures(arm: dict[str, Any]) -> dict[str, float]:
    m = arm["metrics"]
    found = {f"{k}_{q}": float(m[k][q]) for k, q in METRICS}
    found.update(completed=m["completed"], failed=m["failed"], duration_s=m["duration_s"])
    return found


def markdown(report: dict[str, Any]) -> str:
    arms = report["arms"]
    head = " | ".join(f"{k.replace('_ms', '')} {q}" for k, q in METRICS)
    lines = [f"| arm | {head} | completed |", "|---|" + "---:|" * (len(METRICS) + 1)]
    for name in ARMS:
        a = arms[name]
        cells = " | ".join(f"{a[f'{k}_{q}']:,.1f}" for k, q in METRICS)
        lines.append(f"| {name} | {cells} | {a['completed']:.0f} |")
    for kind, sim_arm in (("aggregated", "aggregated"), ("pd", "pd"),
                          ("pd", "pd, the pair's own steps")):  # fmt: skip
        real, sim = arms[f"real {kind}"], arms[f"sim {sim_arm}"]
        cells = " | ".join(f"{sim[f'{k}_{q}'] / real[f'{k}_{q}'] - 1:+.1%}" for k, q in METRICS)
        lines.append(f"| sim vs real, {sim_arm} | {cells} | |")
    link = report["link"]
    lines += ["", "| connector | steps | transfers | tokens | p50 ms a transfer | fixed ms | us a token |",
              "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for kind in ("save", "load"):
        k = link[kind]
        lines.append(f"| {kind} | {k['steps']} | {k['transfers']} | {k['tokens']:,} |"
                     f" {k['p50_ms_per_transfer']:.2f} | {k['fixed_ms']:.2f} | {k['us_per_token']:.3f} |")  # fmt: skip
    groups = ("model workers", "engine cores", "API servers", "proxy", "client",
              "other processes")  # fmt: skip
    lines += ["", "| CPU while replaying, cores | " + " | ".join(groups) + " | wall s |",
              "|---|" + "---:|" * (len(groups) + 1)]  # fmt: skip
    for phase, used in report.get("cpu_cores_used", {}).items():
        cells = " | ".join(f"{used.get(g, 0.0):.2f}" for g in groups)
        lines.append(f"| {phase} | {cells} | {used['wall_s']:.1f} |")
    lines += ["", f"kv_link={link['kv_link']} ({link['bytes_per_token']:,} bytes a token)", "",
              "| server | step kind | steps | measured s | profile's predicted / measured |",
              "|---|---|---:|---:|---:|"]  # fmt: skip
    for server, kinds in report["step_bias"].items():
        for kind, b in kinds.items():
            lines.append(f"| {server} | {kind} | {b['steps']} | {b['measured_s']:.2f} |"
                         f" {b['predicted_over_measured']:.3f} |")  # fmt: skip
    phases = report["sim_phases_ms"]
    lines += ["", "| phase (sim pd) | mean ms | p50 ms | p90 ms |", "|---|---:|---:|---:|"]
    for name, p in phases.items():
        lines.append(f"| {name} | {p['mean']:.1f} | {p['p50']:.1f} | {p['p90']:.1f} |")
    lines += ["", f"real pd, proxy: prefill leg mean {report['real_prefill_leg_ms']:.1f} ms"
              " (HTTP, prefill queue, prefill, KV save)", "",
              "| sim - real TTFT, request by request | p10 ms | p50 ms | p90 ms |",
              "|---|---:|---:|---:|"]  # fmt: skip
    for kind, g in report["per_request"].items():
        lines.append(
            f"| {kind} ({g['n']} requests) | {g['p10']:+.1f} | {g['p50']:+.1f} | {g['p90']:+.1f} |"
        )
    probes = report["probe_ms"]
    sizes = list(probes["real aggregated"])
    lines += ["", "| idle, ms; prompt tokens | " + " | ".join(sizes) + " |",
              "|---|" + "---:|" * len(sizes)]  # fmt: skip
    for name, row in probes.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[n]:.1f}" for n in sizes) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-prompts", type=int, default=40)
    parser.add_argument("--rate-scale", type=float, default=0.5)
    parser.add_argument("--policy", default="least-loaded+sjf")
    parser.add_argument("--port", type=int, default=8300, help="and the next three")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="reprint a --json file's tables")
    a = parser.parse_args()
    if a.table is not None:
        print(markdown(json.loads(a.table.read_text())))
        return
    out = a.out or Path(tempfile.mkdtemp(prefix="vllm-pair-"))
    out.mkdir(parents=True, exist_ok=True)
    log: list[list[str]] = []
    model = tiny_llama(out / "model", word_tokenizer=True, **MODEL)
    register_model_dir(str(model))
    test, train, gap = write_traces(out, a.num_prompts)
    write_probe(out)
    load = os.getloadavg()
    idle_s = gap / a.rate_scale + 2.0  # longer than any idle time within a replay
    began = time.monotonic()
    real_agg, profile, blocks, probe_agg = aggregated(a, model, (test, train), idle_s, out, log)
    real_pd, timing, since, counts, probe_pd = disaggregated(a, model, test, idle_s, out, log)
    link = fit_link(timing, since, get_model(str(model)).kv_bytes_per_token)
    own = own_steps_profile(out, idle_s, log)
    sim = simulate(a, model, test, a.rate_scale, profile, blocks, link["kv_link"], own,
                   out / "sim", log)  # fmt: skip
    simulate(a, model, out / "probe.jsonl", 1.0, profile, blocks, link["kv_link"], own,
             out / "sim-probe", log)  # fmt: skip
    legs = sum(
        v for k, v in counts.items() if k.startswith('schedkit_pd_routed_total{role="prefill"')
    )
    leg_s = sum(v for k, v in counts.items() if k.startswith("schedkit_pd_prefill_seconds_total"))
    report = {
        "date": time.strftime("%Y-%m-%d"), "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(), "machine": f"{os.cpu_count()} CPUs", "wall_s": time.monotonic() - began,
        "policy": a.policy, "num_prompts": a.num_prompts, "rate_scale": a.rate_scale,
        "engine": {**ENGINE, "block_size": BLOCK, "kv_blocks": blocks}, "model": MODEL,
        "commands": log, "profile": json.loads(profile.read_text()), "link": link,
        "arms": {"real aggregated": figures(real_agg["arms"][0]), "real pd": figures(real_pd["arms"][0]),
                 "sim aggregated": figures(sim["arms"][0]), "sim pd": figures(sim["arms"][1]),
                 "sim pd, the pair's own steps": figures(sim["arms"][2])},
        "sim_phases_ms": sim["arms"][1]["metrics"]["disaggregated"]["phases_ms"],
        "real_prefill_leg_ms": 1e3 * leg_s / legs if legs else float("nan"),
        "step_bias": {
            "aggregated (its test)": step_bias(profile, after_idle(
                out / "aggregated-steps.csv", idle_s, out, skip=2)),
            **{name: step_bias(profile, after_idle(out / f"{name}-steps.csv", idle_s, out))
               for name in ("prefill", "decode")},
        },
        "per_request": per_request(out),
        "probe_ms": probe(out, probe_agg, probe_pd),
        "load_average": {"start": load, "end": os.getloadavg()},
        "cpu_cores_used": CPU.phases,
        "out": str(out),
    }  # fmt: skip
    if a.json:  # no machine paths: the output directory is OUT, the checkout's root "."
        text = json.dumps(report, indent=2).replace(str(out), "OUT").replace(f"{ROOT}/", "")
        a.json.write_text(text + "\n")
    print(markdown(report))


if __name__ == "__main__":
    main()
