"""``python -m schedkit_lmdeploy.launch <lmdeploy CLI args>``: LMDeploy's own CLI
(``lmdeploy serve api_server ...``) with the policy that ``SCHEDKIT_CONFIG`` selects.

LMDeploy has no plugin system and its api_server runs the engine in a process it spawns
(``ZMQMPEngine``, ``multiprocessing`` start method ``spawn``). A spawned child imports the
parent's main module again (as ``__mp_main__``), so importing this module is what
activates schedkit, in the api_server process and in the engine process alike:
``activate_from_environ`` (every ``Scheduler`` built afterwards gets a runtime; the
request carrier of ``schedkit_lmdeploy.carrier`` on both sides). Without a config nothing
is patched and LMDeploy runs stock. A Ray engine backend (``--mp-engine-backend ray``)
builds the engine in a Ray actor, which does not import this module: not supported.
"""

from __future__ import annotations

import sys

from schedkit_lmdeploy.patches import activate_from_environ

ACTIVE = activate_from_environ()


def main(argv: list[str]) -> int:
    from lmdeploy.cli.entrypoint import run

    sys.argv = ["lmdeploy", *argv]
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
