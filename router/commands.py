"""The router's sub-commands: ``specgate router`` and ``specgate config check``."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from router.config import ConfigError, load_config

__all__ = ["add_commands"]


def _router(args: argparse.Namespace) -> int:
    import uvicorn

    from router.app import create_app, tune_interpreter

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s" if args.json_logs else
                        "%(asctime)s %(levelname)s %(name)s %(message)s")
    tune_interpreter()
    host = args.host or cfg.server.host
    port = args.port if args.port is not None else cfg.server.port
    uvicorn.run(create_app(args.config), host=host, port=port, loop="uvloop", http="httptools",
                log_level="warning", access_log=False, timeout_keep_alive=30,
                # no X-Forwarded-* rewriting (nothing reads the client address) and no
                # `server` header: both cost CPU on every request (issue 8).
                proxy_headers=False, server_header=False)
    return 0


def _config_check(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    effective = cfg.model_dump(mode="json")
    for pool in cfg.pools:
        for item in effective["pools"]:
            if item["name"] == pool.name:
                item["effective_max_context_tokens"] = cfg.pool_limit(pool)
                item["effective_draft_reserved_tokens"] = pool.reserved_tokens if pool.speculative else 0
    print(json.dumps(effective, indent=2, sort_keys=False))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``router`` and ``config check`` on the ``specgate`` parser."""
    p = sub.add_parser("router", help="run the OpenAI-compatible router")
    p.add_argument("--config", required=True, help="operator YAML")
    p.add_argument("--host", default=None, help="override server.host")
    p.add_argument("--port", type=int, default=None, help="override server.port")
    p.add_argument("--json-logs", action="store_true", help="log lines are bare JSON")
    p.set_defaults(func=_router)

    c = sub.add_parser("config", help="operator config tools")
    csub = c.add_subparsers(dest="config_command", required=True)
    check = csub.add_parser("check", help="validate a config file and print the effective config")
    check.add_argument("path")
    check.set_defaults(func=_config_check)
