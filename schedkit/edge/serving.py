"""What the engine adapters' ``schedkit serve <engine>`` launchers share."""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType

from schedkit.errors import SchedkitError
from schedkit.seal import EDGE_KEY_VAR
from schedkit.tensor_parallel import model_config_file, read_attention_heads

__all__ = [
    "check_tensor_parallel",
    "find_option",
    "last_option",
    "metrics_dir",
    "option_value",
    "run_server",
]


def find_option(
    args: Sequence[str], name: str, *, underscores: bool = False
) -> tuple[int, int, str] | None:
    """The last ``name VALUE`` or ``name=VALUE`` in ``args``: ``(start, stop, value)``,
    ``args[start:stop]`` being the option. With ``underscores`` ``--foo_bar`` counts as
    ``--foo-bar`` too (vLLM's parser accepts both)."""
    spellings = [name]
    if underscores and name.startswith("--"):
        spellings.append("--" + name[2:].replace("-", "_"))
    found = None
    for i, arg in enumerate(args):
        for spelling in spellings:
            if arg == spelling:
                if i + 1 >= len(args):
                    raise SchedkitError(f"{name} needs a value")
                found = (i, i + 2, args[i + 1])
            elif arg.startswith(spelling + "="):
                found = (i, i + 1, arg[len(spelling) + 1 :])
    return found


def option_value(args: Sequence[str], name: str, *, underscores: bool = False) -> str | None:
    """The value of the last ``name VALUE`` or ``name=VALUE`` in ``args`` (``find_option``)."""
    found = find_option(args, name, underscores=underscores)
    return None if found is None else found[2]


def last_option(
    args: Sequence[str], names: Sequence[str], *, underscores: bool = False
) -> tuple[str, str] | None:
    """Of several spellings of one option (``--tensor-parallel-size``, ``-tp``), the last
    one given in ``args``, as argparse reads it: ``(spelling, value)``."""
    found = []
    for name in names:
        option = find_option(args, name, underscores=underscores)
        if option is not None:
            found.append((option[0], args[option[0]].split("=", 1)[0], option[2]))
    if not found:
        return None
    _, spelling, value = max(found)
    return spelling, value


def _given(args: Sequence[str], name: str, underscores: bool) -> bool:
    """Whether ``name`` is in ``args`` in any form (``name``, ``name=V``, ``name.key V``)."""
    spellings = [name]
    if underscores and name.startswith("--"):
        spellings.append("--" + name[2:].replace("-", "_"))
    return any(a == s or a.startswith((s + "=", s + ".")) for a in args for s in spellings)


def check_tensor_parallel(
    args: Sequence[str],
    tp_options: Sequence[str],
    model: str | None,
    *,
    underscores: bool = False,
    unless: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> None:
    """Refuse a tensor-parallel degree that the model's attention heads cannot be split
    over, before the engine starts (the engine refuses it only once it has started).

    ``tp_options`` are the engine's spellings of its degree option, ``model`` the model
    its args name; ``--download-dir`` and ``--revision`` in ``args`` locate a hub model in
    the cache. Nothing is checked when the degree is not an integer, the model's
    ``config.json`` cannot be read here, or an option in ``unless`` is given (options that
    change how the engine splits attention, or what it reads from the config): the engine
    decides then. The rule is :func:`schedkit.tensor_parallel.tp_splits`.
    """
    given = last_option(args, tp_options, underscores=underscores)
    if given is None or not model or any(_given(args, u, underscores) for u in unless):
        return
    flag, text = given
    try:
        tp = int(text)
    except ValueError:
        return  # the engine's parser names a bad value
    config_file = model_config_file(
        model,
        download_dir=option_value(args, "--download-dir", underscores=underscores),
        revision=option_value(args, "--revision", underscores=underscores),
        environ=environ,
    )
    shape = None if config_file is None else read_attention_heads(config_file)
    if tp < 1 or shape is None or tp in shape.degrees:
        return
    if shape.heads % tp:
        why = f"does not divide the model's {shape.heads} attention heads"
    else:
        why = f"neither divides the model's {shape.kv_heads} KV heads nor is a multiple of them"
    raise SchedkitError(
        f"{flag} {tp} {why} ({model}); use one of {', '.join(map(str, shape.degrees))}"
    )


@contextmanager
def metrics_dir(prefix: str, wanted: bool = True) -> Iterator[str | None]:
    """A fresh temporary directory for the server's ``PROMETHEUS_MULTIPROC_DIR`` (named
    ``prefix...``), removed when the server is done; ``None`` when not ``wanted``."""
    if not wanted:
        yield None
        return
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_server(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` until it exits and return its exit code, passing SIGTERM and
    SIGINT on to it (the engines' servers shut down cleanly on either). The server gets
    an edge key (``schedkit.seal``) of its own unless ``env`` sets one: its HTTP edge
    seals what it decides, and its scheduler trusts nothing else."""
    env = dict(env)
    if not env.get(EDGE_KEY_VAR):
        env[EDGE_KEY_VAR] = secrets.token_hex(32)
    process = subprocess.Popen(list(command), env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        process.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
