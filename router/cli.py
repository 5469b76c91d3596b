"""The ``specgate`` command line.

One argparse tree; each package contributes its own sub-commands through an
``add_commands(subparsers)`` function in its ``cli`` module, so no package imports
another's heavy dependencies (torch, SGLang) just to show ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: What ``specgate --help`` says first (plain text: argparse prints it as is).
DESCRIPTION = ("specgate: an OpenAI-compatible router that sends each request to a speculative-decoding or a "
               "plain SGLang pool by prompt length, load and measured acceptance; plus the tools to launch, "
               "load-test and calibrate those pools.")

#: Modules that contribute sub-commands, in help order.
_COMMAND_MODULES = (
    "router.app.commands",
    "serving.cli",
    "drafters.cli",
    "loadtests.cli",
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specgate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Build the full ``specgate`` argument parser.

    Returns:
        The parser; each sub-command sets ``func`` (a callable taking the parsed
        namespace and returning an exit code).
    """
    parser = argparse.ArgumentParser(
        prog="specgate", description=DESCRIPTION,
        epilog="Run `specgate COMMAND --help` for a command's options; docs/ and README.md for the rest.")
    parser.add_argument("--version", action="version", version=f"specgate {_version()}",
                        help="print the installed specgate version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a package without commands yet
            if exc.name == name:
                continue
            raise
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``specgate`` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
