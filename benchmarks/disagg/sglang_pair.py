"""A real SGLang 0.5.23 CPU prefill/decode pair against the simulator's model of it (issue #42).

``vllm_pair.py``'s comparison for SGLang: the same model, trace, policy and engine limits,
replayed four ways (the helpers that do not depend on the engine are imported from
``vllm_pair.py``):

1. **real, aggregated**: one ``schedkit serve sglang`` server, its scheduler process bound
   to core 0 (``--record-steps``). Before the test it serves a warm-up and a training
   trace (the next ``--train`` requests of the same trace, 40 by default); its steps on
   the training trace are the cost profile (``schedkit calibrate``).
2. **real, disaggregated**: a prefill server (``--disaggregation-mode prefill``, its
   scheduler on core 0) and a decode server (``decode``, core 1) joined by SGLang's
   Mooncake transfer engine over TCP (``mooncake_tcp``), ``python -m schedkit.edge.pd
   --protocol sglang`` in front; the replay goes through the proxy. The servers'
   ``/metrics`` are read every second meanwhile (SGLang's ``kv_transfer_*`` and
   per-stage histograms).
3. **simulated, aggregated** and 4. **simulated, disaggregated**
   (``prefill_replicas=1,decode_replicas=1``): ``schedkit bench --engine sim`` with the
   profile, the real servers' KV capacity and limits, SGLang's batches
   (``--no-mixed-prefill``) and ``kv_link=GBS:MS`` fitted to the transfers SGLang
   measured on the prefill server during the test. Two more simulated pairs: the decode
   instance's first token in a decode step (``--mixed-prefill``: SGLang's decode
   instance runs no forward for it), and that with a profile fitted on the pair's own
   test steps.

Every command is printed and kept in the JSON (``--json``); ``--table F.json`` reprints
a finished run's tables. Run from the repository root in ``.venv-sglang``::

    HF_HUB_OFFLINE=1 .venv-sglang/bin/python benchmarks/disagg/sglang_pair.py \\
        --json benchmarks/disagg/sglang-pair.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from vllm_pair import (
    BIN,
    METRICS,
    MODEL,
    PROBE,
    ROOT,
    Server,
    figures,
    first_token_ms,
    replay,
    run,
    step_bias,
    ttfts,
    warm_up,
    write_probe,
    write_traces,
)
from vllm_pair import proxy_metrics as read_metrics

from schedkit.sim.cost.profiles import get_model, register_model_dir
from schedkit.testing.models import tiny_llama

SYSROOT = Path(sys.prefix) / "sysroot"  # Mooncake's Debian libraries (make-venv.sh)
# vllm_pair.py's limits: 4,608 positions, 32 running, 4,608 tokens a prefill batch, and
# its KV capacity (1,820 blocks of 32 tokens); SGLang's page is one token
ENGINE = {"context_length": 4608, "max_running_requests": 32, "chunked_prefill_size": 4608,
          "max_prefill_tokens": 4608, "max_total_tokens": 58240}  # fmt: skip
CPU_ARGS = ["--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend",
            "pytorch", "--disable-cuda-graph", "--disable-overlap-schedule", "--dtype",
            "bfloat16", "--enable-metrics",
            # an idle scheduler polls its sockets in a loop otherwise (Scheduler.on_idle)
            "--sleep-on-idle"]  # fmt: skip
PAUSE_S = 3.0  # between replays: the servers settle, nothing is split by idle gaps here
SCRAPE_S = 1.0  # how often the pair's /metrics are read during the test
ARMS = ("real aggregated", "sim aggregated", "real pd", "sim pd",
        "sim pd, first token in a decode step", "sim pd, the pair's own steps")  # fmt: skip
VERSUS = (("aggregated", "sim aggregated"), ("pd", "sim pd"),
          ("pd", "sim pd, first token in a decode step"), ("pd", "sim pd, the pair's own steps"))  # fmt: skip
MB = 2**20  # SGLang's kv_transfer_total_mb counts bytes / 2**20
LATENCY, SIZE = "sglang:kv_transfer_latency_ms", "sglang:kv_transfer_total_mb"
STAGE = "sglang:per_stage_req_latency_seconds"


# -- the servers -------------------------------------------------------------------


def sglang_server(name: str, model: Path, port: int, policy: str, out: Path,
                  log: list[list[str]], extra: Sequence[str] = ()) -> Server:  # fmt: skip
    """``schedkit serve sglang`` with SGLang's CPU settings; its environment is in the
    command (``env``), so the logged command is the whole of it."""
    libs = ":".join(str(SYSROOT / d / "x86_64-linux-gnu") for d in ("usr/lib", "lib"))
    args = ["--model-path", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--nccl-port", str(port + 100), *CPU_ARGS]  # fmt: skip
    for key, value in ENGINE.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    command = ["env", "HF_HUB_OFFLINE=1", "OMP_NUM_THREADS=1", f"LD_LIBRARY_PATH={libs}",
               str(BIN / "schedkit"), "serve", "sglang", "--policy", policy, "--record-steps",
               str(out / f"{name}-steps.csv"), "--", *args, *extra]  # fmt: skip
    return Server(name, command, {}, out, log)


def flush_cache(url: str, log: list[list[str]]) -> None:
    """Empty the server's radix cache. The bench builds each prompt's token ids from the
    request's index in its trace, so the test's prompts begin as the training trace's
    did: SGLang would serve most of their tokens from cache, the simulator computes them."""
    log.append(["POST", f"{url}/flush_cache"])
    print("$ POST", f"{url}/flush_cache", flush=True)
    with urllib.request.urlopen(urllib.request.Request(f"{url}/flush_cache", b""), timeout=60) as r:
        r.read()


def _processes() -> dict[int, tuple[int, int, str, float]]:
    """pid -> (parent, process group, name, CPU seconds incl. waited-for children)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            seconds = sum(int(x) for x in stat[11:15]) / tick  # utime, stime, cu, cs
            found[int(entry.name)] = (int(stat[1]), int(stat[2]), comm, seconds)
    return found


def pin_scheduler(server: Server, core: int, log: list[list[str]]) -> None:
    """Bind the server's scheduler process, every thread, to ``core`` (as ``vllm_pair.py``
    binds vLLM's model worker); its HTTP server and detokenizer run where the OS puts
    them. SGLang's own binding (``SGLANG_CPU_OMP_THREADS_BIND``) needs its CPU kernels,
    which this install does not have."""
    for pid, (_, group, comm, _) in _processes().items():
        if group == server.process.pid and comm.startswith("sglang::schedul"):
            run(["taskset", "-a", "-p", "-c", str(core), str(pid)], log)
            return
    sys.exit(f"{server.name}: no SGLang scheduler process to bind")


# -- where the CPU went ------------------------------------------------------------


def cpu_seconds(roots: dict[int, str]) -> dict[str, float]:
    """CPU seconds so far: the machine's (``busy``), and this script's process tree's by
    what each process does: SGLang's schedulers and detokenizers (by process name), the
    rest of each server (``HTTP servers``: ``roots`` names the servers' and the proxy's
    pids), the proxy, and the client (this script and the bench commands it ran)."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    found = {"busy": (sum(map(int, fields)) - int(fields[3]) - int(fields[4])) / tick}
    procs = _processes()
    me = os.getpid()
    found["client"] = procs[me][3] if me in procs else 0.0
    frontier = [(pid, roots.get(pid, "client")) for pid, p in procs.items() if p[0] == me]
    while frontier:
        pid, group = frontier.pop()
        mine = group
        if procs[pid][2].startswith("sglang::schedul"):
            mine = "schedulers"
        elif procs[pid][2].startswith("sglang::detoken"):
            mine = "detokenizers"
        found[mine] = found.get(mine, 0.0) + procs[pid][3]
        frontier += [(child, group) for child, p in procs.items() if p[0] == pid]
    return found


class Cpu:
    """Where the machine's CPU went while each replay ran: per phase, each group's CPU
    seconds over the replay's wall time (1.0: one core's worth), and the other
    processes' (another job on a shared machine slows every server here)."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, float]] = {}

    def replay(self, name: str, roots: dict[int, str], *args: Any) -> dict[str, Any]:
        """``vllm_pair.replay(*args)``, measured."""
        began, t0 = cpu_seconds(roots), time.monotonic()
        result = replay(*args)
        ended, wall = cpu_seconds(roots), time.monotonic() - t0
        used = {k: (v - began.get(k, 0.0)) / wall for k, v in ended.items() if k != "busy"}
        used["other processes"] = max(
            0.0, (ended["busy"] - began["busy"]) / wall - sum(used.values())
        )
        self.phases[name] = {"wall_s": wall, "cores": float(os.cpu_count() or 1), **used}
        return result


CPU = Cpu()


# -- what the servers count --------------------------------------------------------


def series(url: str) -> dict[str, float]:
    """A server's histogram sums and counts (SGLang's; per-stage ones as
    ``NAME_sum:STAGE``) and the proxy's ``schedkit_pd_*`` counters, summed over their
    other labels."""
    found: dict[str, float] = {}
    for key, value in read_metrics(url).items():
        name, _, labels = key.partition("{")
        if name.endswith(("_sum", "_count")) or name.startswith("schedkit_pd_"):
            stage = re.search(r'stage="([^"]+)"', labels)
            name = f"{name}:{stage.group(1)}" if stage else name
            found[name] = found.get(name, 0.0) + value
    return found


def kv_tokens(url: str) -> int:
    for key, value in read_metrics(url).items():
        if key.startswith("sglang:max_total_num_tokens"):
            return int(value)
    raise SystemExit("no sglang:max_total_num_tokens on /metrics")


class Scraper:
    """Reads ``urls``' :func:`series` every ``SCRAPE_S`` in a thread while in its
    ``with`` block, and once more at its end: ``readings`` (wall time, name -> series)."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.readings: list[tuple[float, dict[str, dict[str, float]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def read(self) -> None:
        self.readings.append((time.time(), {k: series(u) for k, u in self.urls.items()}))

    def _loop(self) -> None:
        while not self._stop.wait(SCRAPE_S):
            self.read()

    def __enter__(self) -> Scraper:
        self.read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.read()


def step_rows(steps: Path) -> int:
    """Rows written so far to a ``--record-steps`` file (SGLang's flushes every row)."""
    return max(0, len(steps.read_text().splitlines()) - 2)


def read_rows(steps: Path) -> tuple[str, list[dict[str, str]]]:
    """A ``--record-steps`` file's first line (a comment naming the engine) and rows."""
    lines = steps.read_text().splitlines()
    return lines[0], list(csv.DictReader(lines[1:]))


def write_rows(path: Path, comment: str, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        f.write(comment + "\n")
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def steps_slice(steps: Path, first: int, last: int, path: Path, prefill_only: bool = False) -> Path:
    """Rows ``first`` to ``last`` of ``steps`` in ``path``. ``prefill_only`` (a prefill
    server's): ``num_running`` 0 in each row. Such a server reports its request running
    after its prefill step while it waits there for the transfer, and the fit's gap rule
    (``schedkit.sim.cost.fit.with_gaps``) would count the idle time until the next
    arrival as that step's time."""
    comment, rows = read_rows(steps)
    rows = rows[first:last]
    if prefill_only:
        for row in rows:
            row["num_running"] = "0"
    return write_rows(path, comment, rows)


# -- the idle probes ---------------------------------------------------------------

# what one request alone costs on the pair: (name, server, series, to ms)
PARTS = (("prefill leg (proxy)", "proxy", "schedkit_pd_prefill_seconds_total", 1e3),
         ("prefill forward", "prefill", f"{STAGE}_sum:prefill_forward", 1e3),
         ("KV transfer (prefill's count)", "prefill", f"{LATENCY}_sum", 1.0),
         ("KV MB", "prefill", f"{SIZE}_sum", 1.0),
         ("decode server's TTFT", "decode", "sglang:time_to_first_token_seconds_sum", 1e3))  # fmt: skip


def idle_probes(url: str, model: Path, pair: dict[str, str] | None) -> dict[str, Any]:
    """One request at a time (``PROBE`` prompt lengths, fresh prompts, 1 s apart): TTFT,
    and on the pair what its servers and the proxy counted for it (``PARTS``)."""
    rng = np.random.default_rng(8 if pair is None else 7)
    found: dict[str, Any] = {}
    for n in PROBE:
        time.sleep(1.0)
        before = {k: series(u) for k, u in (pair or {}).items()}
        row = {"ttft_ms": first_token_ms(url, model, rng.integers(3, 500, n).tolist())}
        if pair:
            time.sleep(0.3)  # the servers count after the answer
            after = {k: series(u) for k, u in pair.items()}
            for name, server, key, scale in PARTS:
                row[name] = (after[server].get(key, 0.0) - before[server].get(key, 0.0)) * scale
        found[str(n)] = row
    return found


# -- the four ways -----------------------------------------------------------------


def aggregated(a: argparse.Namespace, model: Path, paths: tuple[Path, Path], out: Path,
               log: list[list[str]]) -> dict[str, Any]:  # fmt: skip
    """The real aggregated arm, and the profile fitted on the same server's training steps."""
    test, train = paths
    server = sglang_server("aggregated", model, a.port, a.policy, out, log)
    url, steps = f"http://127.0.0.1:{a.port}", out / "aggregated-steps.csv"
    roots = {server.process.pid: "HTTP servers"}
    try:
        print(f"aggregated server up in {server.wait(url):.0f} s", flush=True)
        pin_scheduler(server, 0, log)
        warm_up(url, model, 1)
        time.sleep(PAUSE_S)
        rows = [step_rows(steps)]
        CPU.replay(
            "train", roots, url, train, model, a.policy, a.rate_scale, out / "real-train", log
        )
        time.sleep(PAUSE_S)
        flush_cache(url, log)
        rows.append(step_rows(steps))
        real = CPU.replay("real aggregated", roots, url, test, model, a.policy, a.rate_scale,
                          out / "real-aggregated", log)  # fmt: skip
        rows.append(step_rows(steps))
        probes = idle_probes(url, model, None)
        kv = kv_tokens(url)
    finally:
        server.stop()
    train_steps = steps_slice(steps, rows[0], rows[1], out / "aggregated-train-steps.csv")
    profile = out / "cpu-profile.json"
    run([BIN / "schedkit", "calibrate", train_steps, "--out", profile, "--model", model], log)
    return {"real": real, "profile": profile, "kv_tokens": kv, "probes": probes,
            "test_steps": steps_slice(steps, rows[1], rows[2], out / "aggregated-test-steps.csv")}  # fmt: skip


def start_pair(a: argparse.Namespace, model: Path, out: Path, log: list[list[str]],
               servers: list[Server]) -> dict[str, str]:  # fmt: skip
    """The prefill and decode servers (schedulers on cores 0 and 1) and the proxy, up, in
    ``servers`` as soon as each starts (for the caller to stop); their URLs."""
    ports = {"prefill": a.port + 1, "decode": a.port + 2, "proxy": a.port + 3}
    bootstrap = str(a.port + 4)
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    mooncake = ["--disaggregation-transfer-backend", "mooncake_tcp"]
    roles = {"prefill": ["--disaggregation-mode", "prefill", *mooncake,
                         "--disaggregation-bootstrap-port", bootstrap],
             # on CPU: SGLang's default backup of retracted requests needs CUDA
             "decode": ["--disaggregation-mode", "decode", *mooncake,
                        "--disaggregation-decode-retraction-backup", "cpu_tensor"]}  # fmt: skip
    servers += [sglang_server(n, model, ports[n], a.policy, out, log, x) for n, x in roles.items()]
    for core, server in enumerate(servers):
        print(f"{server.name} server up in {server.wait(url[server.name]):.0f} s", flush=True)
        pin_scheduler(server, core, log)
    servers.append(Server("proxy", [sys.executable, "-m", "schedkit.edge.pd", "--policy",
                                    a.policy, "--protocol", "sglang", "--prefill", url["prefill"],
                                    "--bootstrap-port", bootstrap, "--decode", url["decode"],
                                    "--port", str(ports["proxy"])], {}, out, log))  # fmt: skip
    servers[-1].wait(url["proxy"])
    return url


def disaggregated(a: argparse.Namespace, model: Path, test: Path, out: Path,
                  log: list[list[str]]) -> dict[str, Any]:  # fmt: skip
    """The real pair behind the proxy: its replay, the servers' and the proxy's counts
    read during it, the idle probes, and each server's steps of the test."""
    servers: list[Server] = []
    names = ("prefill", "decode")
    try:
        url = start_pair(a, model, out, log, servers)
        warm_up(url["proxy"], model, 2)
        time.sleep(PAUSE_S)
        first = {n: step_rows(out / f"{n}-steps.csv") for n in names}
        roots = {s.process.pid: "proxy" if s.name == "proxy" else "HTTP servers" for s in servers}
        with Scraper({n: url[n] for n in (*names, "proxy")}) as scraper:
            real = CPU.replay("real pd", roots, url["proxy"], test, model, a.policy,
                              a.rate_scale, out / "real-pd", log)  # fmt: skip
        last = {n: step_rows(out / f"{n}-steps.csv") for n in names}
        probes = idle_probes(url["proxy"], model, {n: url[n] for n in (*names, "proxy")})
    finally:
        for server in reversed(servers):
            server.stop()
    steps = {n: steps_slice(out / f"{n}-steps.csv", first[n], last[n], out / f"{n}-test-steps.csv",
                            prefill_only=n == "prefill") for n in names}  # fmt: skip
    return {"real": real, "readings": scraper.readings, "probes": probes, "steps": steps}


def own_steps_profile(steps: dict[str, Path], out: Path, log: list[list[str]]) -> Path:
    """A profile fitted on the pair's own test steps (the prefill server's give the prefill
    terms, the decode server's the decode terms), as they ran on this machine. The
    servers' clocks differ: the decode server's rows go after the prefill server's."""
    comment, rows = read_rows(steps["prefill"])
    later = max(float(r["end_s"]) for r in rows) + 60.0
    for row in read_rows(steps["decode"])[1]:
        for key in ("start_s", "end_s"):
            row[key] = f"{float(row[key]) + later:.6f}"
        rows.append(row)
    merged = write_rows(out / "pair-test-steps.csv", comment, rows)
    profile = out / "pair-profile.json"
    run([BIN / "schedkit", "calibrate", merged, "--out", profile, "--model", out / "model"], log)
    return profile


def simulate(a: argparse.Namespace, model: Path, trace: Path, rate: float, profile: Path,
             kv: int, link: str, own: Path, out: Path, log: list[list[str]]) -> list[dict[str, Any]]:  # fmt: skip
    """The simulator's arms, in ``ARMS``' order: with SGLang's batches
    (``--no-mixed-prefill``) the aggregated engine and the pair; with vLLM's
    (``--mixed-prefill``: the decode instance's first token rides a decode step) the pair
    with the profile and with the pair's own steps. The link is ``link`` in every pair:
    SGLang's transfer runs beside the steps, not in them."""
    pair = f"policy={a.policy},prefill_replicas=1,decode_replicas=1,kv_link={link}"
    common = [BIN / "schedkit", "bench", "--engine", "sim", "--workload", trace, "--model", model,
              "--profile", profile, "--policy", a.policy, "--rate-scale", rate,
              "--block-size", 1, "--num-gpu-blocks-override", kv,
              "--max-num-seqs", ENGINE["max_running_requests"],
              "--max-num-batched-tokens", ENGINE["max_prefill_tokens"], "--overwrite"]  # fmt: skip
    run([*common, "--no-mixed-prefill", "--arm", f"name=pd,{pair}", "--out", out / "sglang"], log)
    arms = json.loads((out / "sglang" / "results.json").read_text())["arms"]
    run([*common, "--mixed-prefill", "--arm", f"name=pd-first-token-in-decode-step,{pair}",
         "--arm", f"name=pd-own-steps,{pair},profile={own}", "--out", out / "mixed"], log)  # fmt: skip
    arms += json.loads((out / "mixed" / "results.json").read_text())["arms"][1:]
    for arm, where in zip(arms, ("sglang", "sglang", "mixed", "mixed"), strict=True):
        arm["requests"] = str(out / where / "requests.csv")
    return list(arms)


# -- what they say -----------------------------------------------------------------


def transfers(readings: list[tuple[float, dict[str, dict[str, float]]]]) -> list[tuple[float, ...]]:
    """Per reading interval with a transfer in it, the prefill server's count of them,
    their MB and their latency (SGLang's ``kv_transfer_*``: from the prefill's end to
    its scheduler seeing the transfer done)."""
    rows = []
    for (_, before), (_, after) in itertools.pairwise(readings):
        got = [after["prefill"].get(k, 0.0) - before["prefill"].get(k, 0.0)
               for k in (f"{LATENCY}_count", f"{SIZE}_sum", f"{LATENCY}_sum")]  # fmt: skip
        if got[0] > 0:
            rows.append(tuple(got))
    return rows


def fit_link(rows: Sequence[tuple[float, ...]], bytes_per_token: int) -> dict[str, Any]:
    """ms = fixed x transfers + per_mb x MB by least squares over ``rows`` (transfers, MB,
    ms); ``kv_link`` is the bandwidth 1 / per_mb (1000 GB/s where the size explains
    nothing) and the fixed ms (0 where negative)."""
    x = np.array([r[:2] for r in rows], dtype=float)
    y = np.array([r[2] for r in rows], dtype=float)
    (fixed, per_mb), *_ = np.linalg.lstsq(x, y, rcond=None)
    gbs = min(1000.0, MB / (per_mb * 1e-3) / 1e9) if per_mb > 0 else 1000.0
    return {"intervals": len(rows), "transfers": int(x[:, 0].sum()), "mb": float(x[:, 1].sum()),
            "mean_ms": float(y.sum() / x[:, 0].sum()), "fixed_ms": float(fixed),
            "us_per_token": float(per_mb * 1e3 * bytes_per_token / MB), "gbs": gbs,
            "kv_link": f"{gbs:.4g}:{max(0.0, fixed):.4g}", "bytes_per_token": bytes_per_token}  # fmt: skip


# the real pair's stages, means over the test: (name, server, series, its count, to ms)
STAGES = (
    ("prefill server: waiting for decode's handshake", "prefill", f"{STAGE}_sum:prefill_bootstrap",
     f"{STAGE}_count:prefill_bootstrap", 1e3),
    ("prefill server: queue", "prefill", "sglang:queue_time_seconds_sum",
     "sglang:queue_time_seconds_count", 1e3),
    ("prefill server: forward", "prefill", f"{STAGE}_sum:prefill_forward",
     f"{STAGE}_count:prefill_forward", 1e3),
    ("prefill server: KV transfer", "prefill", f"{LATENCY}_sum", f"{LATENCY}_count", 1.0),
    ("proxy: prefill leg (HTTP to the prefill server and back)", "proxy",
     "schedkit_pd_prefill_seconds_total", "schedkit_pd_requests_total", 1e3),
    ("decode server: handshake and KV allocation", "decode", f"{STAGE}_sum:decode_bootstrap",
     f"{STAGE}_count:decode_bootstrap", 1e3),
    ("decode server: then until the KV landed", "decode", f"{STAGE}_sum:decode_transferred",
     f"{STAGE}_count:decode_transferred", 1e3),
    ("decode server: KV landed to first token", "decode", f"{STAGE}_sum:decode_waiting",
     f"{STAGE}_count:decode_waiting", 1e3),
    ("decode server: its own TTFT", "decode", "sglang:time_to_first_token_seconds_sum",
     "sglang:time_to_first_token_seconds_count", 1e3),
)  # fmt: skip


def prompt_tokens(out: Path, agg: dict[str, Any], pd: dict[str, Any]) -> dict[str, int]:
    """The test's prompt tokens, and those each server computed during it (its steps')."""
    trace = (out / "azure-conv-test.jsonl").read_text().splitlines()[1:]
    found = {"the test's prompts": sum(json.loads(line)["prompt_tokens"] for line in trace)}
    steps = {
        "aggregated server": agg["test_steps"],
        **{f"{n} server": p for n, p in pd["steps"].items()},
    }
    for name, path in steps.items():
        found[f"{name} computed"] = sum(int(r["prefill_tokens"]) for r in read_rows(path)[1])
    return found


def stage_means(readings: list[tuple[float, dict[str, dict[str, float]]]]) -> dict[str, float]:
    """``STAGES``' means over the test (its first and last readings)."""
    (_, first), (_, last) = readings[0], readings[-1]
    found = {}
    for name, server, total, count, scale in STAGES:
        n = last[server].get(count, 0.0) - first[server].get(count, 0.0)
        if n > 0:
            found[name] = (last[server].get(total, 0.0) - first[server].get(total, 0.0)) / n * scale
    return found


def sim_phases(arm: dict[str, Any]) -> dict[str, float]:
    """A simulated pair's phase means up to the first token, the decode instance's first
    step being TTFT's mean less the phases before it."""
    m = arm["metrics"]
    phases = {k: v["mean"] for k, v in m["disaggregated"]["phases_ms"].items() if k != "decode"}
    phases["first decode step"] = m["ttft_ms"]["mean"] - sum(phases.values())
    phases["TTFT"] = m["ttft_ms"]["mean"]
    return phases


def per_request(out: Path, sim: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per simulated arm, its TTFT minus the real one, request by request: p10, p50, p90 ms."""
    found = {}
    for (kind, name), arm in zip(VERSUS, sim, strict=True):
        mine = ttfts(Path(arm["requests"]), arm["policy"])
        real = ttfts(out / f"real-{kind}" / "requests.csv")
        gaps = [mine[k][1] - v[1] for k, v in real.items() if k in mine]
        p10, p50, p90 = np.percentile(gaps, [10, 50, 90])
        found[name] = {"p10": float(p10), "p50": float(p50), "p90": float(p90), "n": len(gaps)}
    return found


def probe(
    sim: list[dict[str, Any]], real_agg: dict[str, Any], real_pd: dict[str, Any]
) -> dict[str, Any]:
    """The idle probes: per prompt length, TTFT four ways, and what the pair counted."""
    names = ("sim aggregated", "sim pd", "sim pd, first token in a decode step")
    sims = {name: {str(n): ms for n, ms in ttfts(Path(arm["requests"]), arm["policy"]).values()}
            for name, arm in zip(names, sim, strict=False)}  # fmt: skip
    found: dict[str, Any] = {"real aggregated": {n: r["ttft_ms"] for n, r in real_agg.items()},
                             "sim aggregated": sims.pop("sim aggregated"),
                             "real pd": {n: r["ttft_ms"] for n, r in real_pd.items()}, **sims}  # fmt: skip
    for part, *_ in PARTS:
        found[f"real pd: {part}"] = {n: r.get(part, 0.0) for n, r in real_pd.items()}
    return found


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
            *("| " + " | ".join(r) + " |" for r in rows)]  # fmt: skip


def results_table(report: dict[str, Any]) -> list[str]:
    arms = report["arms"]
    rows = [[name, *(f"{arms[name][f'{k}_{q}']:,.1f}" for k, q in METRICS),
             f"{arms[name]['completed']:.0f}"] for name in ARMS]  # fmt: skip
    for kind, name in VERSUS:
        real, sim = arms[f"real {kind}"], arms[name]
        rows.append([f"{name} vs real",
                     *(f"{sim[f'{k}_{q}'] / real[f'{k}_{q}'] - 1:+.1%}" for k, q in METRICS), ""])  # fmt: skip
    head = ["arm", *(f"{k.replace('_ms', '')} {q}" for k, q in METRICS), "completed"]
    return _table(head, rows)


def link_table(report: dict[str, Any]) -> list[str]:
    rows = []
    for name, k in report["link"]["fits"].items():
        rows.append([name, f"{k['transfers']}", f"{k['mb']:,.1f}", f"{k['mean_ms']:.2f}",
                     f"{k['fixed_ms']:.2f}", f"{k['us_per_token']:.3f}", f"{k['gbs']:.3g}"])  # fmt: skip
    head = ["KV transfers (Mooncake TCP)", "transfers", "MB", "mean ms", "fixed ms", "us a token",
            "GB/s"]  # fmt: skip
    link = report["link"]
    return [*_table(head, rows), "",
            f"kv_link={link['kv_link']} ({link['bytes_per_token']:,} bytes a token)"]  # fmt: skip


def time_tables(report: dict[str, Any]) -> list[str]:
    stages = [[name, f"{ms:,.1f}"] for name, ms in report["real_stages_ms"].items()]
    stages.append(
        ["client (through the proxy): TTFT", f"{report['arms_ttft_mean']['real pd']:,.1f}"]
    )
    lines = [*_table(["real pd, mean over the test", "ms"], stages), ""]
    names = list(report["sim_phases_ms"])
    phases = list(report["sim_phases_ms"][names[0]])
    rows = [[p, *(f"{report['sim_phases_ms'][n][p]:,.1f}" for n in names)] for p in phases]
    return lines + _table(["simulated, mean ms", *names], rows)


def cpu_table(report: dict[str, Any]) -> list[str]:
    groups = ("schedulers", "detokenizers", "HTTP servers", "proxy", "client", "other processes")
    rows = [[phase, *(f"{used.get(g, 0.0):.2f}" for g in groups), f"{used['wall_s']:.1f}"]
            for phase, used in report["cpu_cores_used"].items()]  # fmt: skip
    return _table(["CPU while replaying, cores", *groups, "wall s"], rows)


def markdown(report: dict[str, Any]) -> str:
    computed = "; ".join(f"{k} {v:,}" for k, v in report["prompt_tokens"].items())
    lines = [*results_table(report), "", f"Prompt tokens in the test: {computed}.", ""]
    lines += [*link_table(report), "", *time_tables(report), ""]
    lines += [*cpu_table(report), ""]
    rows = [[server, kind, f"{b['steps']}", f"{b['measured_s']:.2f}", f"{b['predicted_over_measured']:.3f}"]
            for server, kinds in report["step_bias"].items() for kind, b in kinds.items()]  # fmt: skip
    lines += _table(
        ["server", "step kind", "steps", "measured s", "profile's predicted / measured"], rows
    )
    rows = [[f"{kind} ({g['n']} requests)", *(f"{g[q]:+.1f}" for q in ("p10", "p50", "p90"))]
            for kind, g in report["per_request"].items()]  # fmt: skip
    lines += [
        "",
        *_table(["sim - real TTFT, request by request", "p10 ms", "p50 ms", "p90 ms"], rows),
    ]
    probes = report["probe_ms"]
    sizes = list(probes["real aggregated"])
    rows = [
        [name, *(f"{row.get(n, float('nan')):,.1f}" for n in sizes)] for name, row in probes.items()
    ]
    lines += ["", *_table(["idle, ms; prompt tokens", *sizes], rows)]
    return "\n".join(lines)


# -- the run -----------------------------------------------------------------------


def shorten(trace: Path, n: int) -> None:
    """Keep the first ``n`` requests of a trace ``vllm_pair.write_traces`` wrote (its
    training trace has 120: on SGLang here 85 of them took over 5 minutes, a decode step
    costing 7.9 us per token of the batch's KV, over three times vLLM's 2.4 us)."""
    lines = trace.read_text().splitlines()
    trace.write_text("\n".join(lines[: 1 + n]) + "\n")


def machine() -> dict[str, Any]:
    info = Path("/proc/cpuinfo").read_text()
    cpu = re.search(r"model name\s*:\s*(.+)", info)
    flags = re.search(r"flags\s*:\s*(.+)", info)
    memory = re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text())
    packages = {}
    for name in ("sglang", "mooncake-transfer-engine-non-cuda", "torch", "transformers"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = "not installed"
    return {"cpus": os.cpu_count(), "cpu": cpu.group(1) if cpu else "?",
            "amx": bool(flags and "amx_bf16" in flags.group(1).split()),
            "memory_gib": round(int(memory.group(1)) / 2**20, 1) if memory else None,
            "python": sys.version.split()[0], "packages": packages}  # fmt: skip


def sims(a: argparse.Namespace, model: Path, agg: dict[str, Any], pd: dict[str, Any],
         out: Path, log: list[list[str]]) -> tuple[dict[str, Any], list[Any], list[Any], Path]:  # fmt: skip
    """The link fits (the test's readings: the one the simulator gets; the idle probes'
    for comparison), then the simulator on the test and on the idle probes."""
    bytes_per_token = get_model(str(model)).kv_bytes_per_token
    probes = [(1.0, r["KV MB"], r["KV transfer (prefill's count)"]) for r in pd["probes"].values()]
    fits = {"the test (per 1 s reading, prefill server)": fit_link(transfers(pd["readings"]), bytes_per_token),
            "idle probes (one request each)": fit_link(probes, bytes_per_token)}  # fmt: skip
    link = {**next(iter(fits.values())), "fits": fits}
    own = own_steps_profile(pd["steps"], out, log)
    args = (agg["profile"], agg["kv_tokens"], link["kv_link"], own)
    sim = simulate(a, model, out / "azure-conv-test.jsonl", a.rate_scale, *args, out / "sim", log)
    sim_probe = simulate(a, model, out / "probe.jsonl", 1.0, *args, out / "sim-probe", log)
    return link, sim, sim_probe, own


def build_report(a: argparse.Namespace, out: Path, log: list[list[str]], agg: dict[str, Any],
                 pd: dict[str, Any], fitted: tuple[dict[str, Any], list[Any], list[Any], Path],
                 began: float, load: tuple[float, ...]) -> dict[str, Any]:  # fmt: skip
    link, sim, sim_probe, own = fitted
    arms = [agg["real"]["arms"][0], sim[0], pd["real"]["arms"][0], *sim[1:]]
    return {
        "date": time.strftime("%Y-%m-%d"), "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip(), "machine": machine(), "wall_s": time.monotonic() - began,
        "policy": a.policy, "num_prompts": a.num_prompts, "train": a.train, "rate_scale": a.rate_scale,
        "engine": {**ENGINE, "kv_tokens": agg["kv_tokens"]}, "model": MODEL, "commands": log,
        "profile": json.loads(agg["profile"].read_text()),
        "pair_profile": json.loads(own.read_text()), "link": link,
        "arms": {name: figures(arm) for name, arm in zip(ARMS, arms, strict=True)},
        "arms_ttft_mean": {name: arm["metrics"]["ttft_ms"]["mean"] for name, arm in zip(ARMS, arms, strict=True)},
        "prompt_tokens": prompt_tokens(out, agg, pd),
        "real_stages_ms": stage_means(pd["readings"]),
        "sim_phases_ms": {name: sim_phases(arm) for name, arm in zip(ARMS[3:], sim[1:], strict=True)},
        "step_bias": {
            "aggregated (its test)": step_bias(agg["profile"], agg["test_steps"]),
            **{f"{n} (the pair's test)": step_bias(agg["profile"], pd["steps"][n]) for n in ("prefill", "decode")},
        },
        "per_request": per_request(out, sim),
        "probe_ms": probe(sim_probe, agg["probes"], pd["probes"]),
        "load_average": {"start": load, "end": os.getloadavg()},
        "cpu_cores_used": CPU.phases,
        "out": str(out),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-prompts", type=int, default=40)
    parser.add_argument("--rate-scale", type=float, default=0.5)
    parser.add_argument("--train", type=int, default=40, help="requests of the training trace")
    parser.add_argument("--policy", default="least-loaded+sjf")
    parser.add_argument("--port", type=int, default=8400, help="and the next four, and +100")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="reprint a --json file's tables")
    a = parser.parse_args()
    if a.table is not None:
        print(markdown(json.loads(a.table.read_text())))
        return
    out = a.out or Path(tempfile.mkdtemp(prefix="sglang-pair-"))
    out.mkdir(parents=True, exist_ok=True)
    log: list[list[str]] = []
    model = tiny_llama(out / "model", word_tokenizer=True, **MODEL)
    register_model_dir(str(model))
    test, train, _ = write_traces(out, a.num_prompts)
    shorten(train, a.train)
    write_probe(out)
    load, began = os.getloadavg(), time.monotonic()
    agg = aggregated(a, model, (test, train), out, log)
    pd = disaggregated(a, model, test, out, log)
    fitted = sims(a, model, agg, pd, out, log)
    report = build_report(a, out, log, agg, pd, fitted, began, load)
    if a.json:  # no machine paths: the output directory is OUT, the checkout's root "."
        text = json.dumps(report, indent=2).replace(str(out), "OUT").replace(f"{ROOT}/", "")
        a.json.write_text(text + "\n")
    print(markdown(report))


if __name__ == "__main__":
    main()
