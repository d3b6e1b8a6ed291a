"""``python -m schedkit_ray serve``: simulated replicas behind Ray Serve, routed by a
schedkit policy.

``python -m schedkit_ray serve --replicas N [--policy P] [--options JSON] [--port P]
-- <schedkit serve sim engine args>`` starts a local Ray, runs ``schedkit_ray.app``
(N ``SimReplica``s, each ``schedkit serve sim`` with those engine arguments, behind an
OpenAI-compatible ingress) and prints its URL; SIGTERM or SIGINT stops it. Without
``--policy`` the router is Ray's default. Bad input is one line on stderr, status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import NoReturn

from schedkit.config import SchedkitConfig
from schedkit.errors import SchedkitError

from schedkit_ray.compat import check_ray
from schedkit_ray.policy import router_config

__all__ = ["main"]

PROG = "python -m schedkit_ray serve"
APP_NAME = "schedkit"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not the usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Simulated replicas (schedkit serve sim) behind Ray Serve, each request"
        " routed by the policy's route_request (Ray's default router without --policy).",
        epilog="Arguments after -- are the replicas' engine arguments (schedkit serve sim"
        " --help), e.g. -- --model Llama-3-8B --gpu H100-SXM",
    )
    parser.add_argument("--replicas", type=int, default=2, help="worker replicas (default 2)")
    parser.add_argument("--policy", default=None, help="a policy, composition or config file")
    parser.add_argument("--options", default=None, help='JSON: {"policy-name": {...}}')
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--stats-period-s", type=float, default=1.0,
        help="how often replicas report their gauges to the router (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--budget-ms", type=float, default=50.0,
        help="the policy's time per decision before Ray's default routes (default 50)",
    )  # fmt: skip
    parser.add_argument("--num-cpus", type=int, default=None, help="for ray.init (default: all)")
    return parser


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    args = list(argv)
    if "--" in args:
        cut = args.index("--")
        return args[:cut], args[cut + 1 :]
    return args, []


def _check(args: argparse.Namespace, engine_args: list[str]) -> SchedkitConfig | None:
    """The router's config, once everything given is known to work (else SchedkitError)."""
    if args.replicas < 1:
        raise SchedkitError(f"--replicas {args.replicas}: give at least 1")
    if not 0 < args.port < 65536:
        raise SchedkitError(f"--port {args.port} is not a port number (1-65535)")
    if not args.stats_period_s > 0 or not args.budget_ms > 0:
        raise SchedkitError("--stats-period-s and --budget-ms must be > 0")
    config = router_config(args.policy, args.options)
    from schedkit.facade import PolicyFacade
    from schedkit.simserver import SimServer

    PolicyFacade.from_config(config)  # the policies load here, not in a replica's log
    SimServer.create(config or SchedkitConfig(), engine_args)  # the engine arguments too
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Ray's proxy binds
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            raise SchedkitError(
                f"cannot serve on {args.host}:{args.port}: {exc.strerror}"
            ) from None
    return config


def _serve(args: argparse.Namespace, config: SchedkitConfig | None, engine: list[str]) -> None:
    import ray
    from ray import serve

    from schedkit_ray.app import AppSpec, build_app, routes

    stop = threading.Event()
    ray.init(
        address="local",  # a cluster of its own, not one another driver started
        num_cpus=args.num_cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
    )
    # after ray.init, which installs its own SIGTERM handler (it exits without cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        spec = AppSpec(args.replicas, config, engine, args.stats_period_s, args.budget_ms)
        serve.run(build_app(spec), name=APP_NAME, route_prefix="/")
        engines = "" if config is None else f", {'+'.join(config.policy)} in the engines"
        router = "Ray's default router"
        if config is not None and routes(config):
            router = f"routed by {'+'.join(config.policy)}"
        print(
            f"schedkit_ray: {args.replicas} replicas, {router}{engines},"
            f" on http://{args.host}:{args.port}"
        )
        sys.stdout.flush()
        stop.wait()
        print("schedkit_ray: stopping")
    finally:
        # Not serve.shutdown(): a signal to the process group (Ctrl-C, bench's
        # --serve-command) has reached Ray's own processes too, and it would wait 30 s for
        # a controller already gone. The cluster is this process's: ray.shutdown() ends it.
        ray.shutdown()
        _wait_closed(args.host, args.port)


def _wait_closed(host: str, port: int, limit_s: float = 20.0) -> None:
    """Return once nothing answers on ``host:port`` (Ray's HTTP proxy is another process,
    which outlives ``ray.shutdown`` by a moment): whoever stopped this server may start
    another on the port as soon as it exits."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex((host, port)) != 0:
                return
        time.sleep(0.2)


def main(argv: Sequence[str] | None = None) -> int:
    """The command; returns its exit status."""
    given, engine_args = _split(sys.argv[1:] if argv is None else argv)
    if not given or given[0] != "serve":
        print(f"{PROG.rsplit(' ', 1)[0]}: error: the command is 'serve' (see serve --help)",
              file=sys.stderr)  # fmt: skip
        return 2
    args = _parser().parse_args(given[1:])
    try:
        check_ray()
        config = _check(args, engine_args)
    except SchedkitError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("RAY_SERVE_LOG_TO_STDERR", "0")
    _serve(args, config, engine_args)
    return 0
