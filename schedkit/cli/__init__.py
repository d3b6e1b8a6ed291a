"""The ``schedkit`` command: its small commands, ``policies``, ``workloads``, ``export`` and
``serve`` (:mod:`.commands`), and its bigger ones, ``bench`` and ``calibrate``
(:mod:`.bench`) and ``plan`` (:mod:`.plan`)."""

from schedkit.cli.commands import app, describe_policies, main, print_error

__all__ = ["app", "describe_policies", "main", "print_error"]
