"""``specgate serve`` (launch one pool's SGLang server) and ``specgate warmup``."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys

__all__ = ["add_commands"]


def _serve(args: argparse.Namespace) -> int:
    from router import ConfigError, check_engine_paths, load_config
    from serving.launch import (
        LaunchError,
        check_with_sglang,
        engine_argv,
        engine_env,
        launch_command,
    )

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"specgate serve: {exc}", file=sys.stderr)
        return 2
    names = [p.name for p in cfg.pools]
    if args.pool not in names:
        print(f"specgate serve: no pool {args.pool!r} in {args.config}; its pools: {', '.join(names)}",
              file=sys.stderr)
        return 2
    try:
        argv = engine_argv(cfg, args.pool, host=args.host, port=args.port)
    except (LaunchError, KeyError) as exc:
        print(f"specgate serve: {exc}", file=sys.stderr)
        return 2
    cmd = launch_command(argv)
    if args.print_args:
        print(shlex.join(cmd))
        return 0
    try:
        check_engine_paths(cfg, [args.pool])
    except ConfigError as exc:
        print(f"specgate serve: {exc}", file=sys.stderr)
        return 2
    try:
        checked = check_with_sglang(argv)
    except LaunchError as exc:
        print(f"specgate serve: {exc}", file=sys.stderr)
        return 2
    if not checked:
        print("specgate serve: SGLang is not importable here; launching unchecked", file=sys.stderr)
    os.execvpe(cmd[0], cmd, engine_env(cfg, args.pool))
    return 0  # pragma: no cover - exec does not return


def _warmup(args: argparse.Namespace) -> int:
    from serving.warmup import WarmupError, wait_ready

    try:
        result = asyncio.run(wait_ready(args.url, count=args.count, timeout_s=args.timeout))
    except WarmupError as exc:
        print(f"specgate warmup: {exc}", file=sys.stderr)
        return 1
    print(f"{result.url}: healthy after {result.health_s:.1f} s; warm-up generations: "
          + ", ".join(f"{t:.2f} s" for t in result.generation_s))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``serve`` and ``warmup``."""
    s = sub.add_parser("serve", help="launch one pool's SGLang server from the operator YAML")
    s.add_argument("--config", required=True, help="the operator YAML that holds the pool's engine section")
    s.add_argument("--pool", required=True, help="name of the pool to launch (a pools[].name of --config)")
    s.add_argument("--host", default=None, help="default: the pool's first endpoint's host")
    s.add_argument("--port", type=int, default=None, help="default: the pool's first endpoint's port")
    s.add_argument("--print-args", action="store_true", help="print the command line and exit")
    s.set_defaults(func=_serve)

    w = sub.add_parser("warmup", help="wait for an SGLang endpoint's /health, then warm it up")
    w.add_argument("--url", required=True, help="base URL of the SGLang server, e.g. http://127.0.0.1:30000")
    w.add_argument("--count", type=int, default=3, help="warm-up generations (default 3)")
    w.add_argument("--timeout", type=float, default=600.0, help="seconds")
    w.set_defaults(func=_warmup)

    from serving.demo import add_demo_command
    from serving.probe import add_commands as add_probe_commands

    add_demo_command(sub)
    add_probe_commands(sub)
