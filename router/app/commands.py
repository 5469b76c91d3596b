"""The router's sub-commands: ``specgate router``, ``specgate config check``, ``specgate drain``.

Exit statuses: 0 success; 2 a start or check that failed (invalid config, a missing tokenizer
or key file, a port in use), with one line on stderr saying why and no traceback; ``router``
exits 1 when its drain had to cut requests (:mod:`router.front.drain`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from router.config.tree import Config, ConfigError, load_config

__all__ = ["add_commands", "check_engine_paths", "check_paths", "mask_url"]

#: A tokenizer directory needs its config and one of these vocabulary files (the files
#: ``transformers.AutoTokenizer`` loads a fast or slow tokenizer from).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def mask_url(url: str | None) -> str | None:
    """``url`` with the password of its userinfo replaced by ``****``
    (``redis://u:pw@h:6379/0`` -> ``redis://u:****@h:6379/0``)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None and "@" not in parts.netloc:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:****@{host}"))


def check_paths(cfg: Config) -> None:
    """Check that the files the router reads at start exist: the tokenizer directory (with
    ``tokenizer_config.json`` and a vocabulary file) and every configured key file and
    variable (:func:`router.access.auth.load_auth`, :func:`router.access.auth.load_engine_key`).

    Raises:
        ConfigError: one line naming the missing path or variable.
    """
    from router.access.auth import load_auth, load_engine_key

    for model in cfg.models:
        key = "model.tokenizer" if len(cfg.models) == 1 else f"models[{model.name}].tokenizer"
        tok = Path(model.tokenizer)
        if not tok.is_dir():
            raise ConfigError(f"{key}: no such directory: {tok}")
        if not (tok / "tokenizer_config.json").is_file() or not any((tok / f).is_file() for f in _TOKENIZER_FILES):
            raise ConfigError(f"{key}: {tok} holds no tokenizer (needs tokenizer_config.json "
                              f"and one of {', '.join(_TOKENIZER_FILES)})")
    load_auth(cfg.auth)
    load_engine_key(cfg.auth)


#: A Hugging Face hub id (``org/name``): SGLang downloads it, so it is not a local path to check.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def check_engine_paths(cfg: Config, pools: Iterable[str] | None = None) -> None:
    """Check the model directories ``specgate serve`` would hand SGLang: for every pool with an
    ``engine`` block (or only those named in ``pools``), ``engine.model_path`` and
    ``engine.speculative_draft_model_path`` when set. A local path (absolute, or starting with
    ``.`` or ``~``; the loader has already made paths that exist absolute) must be a directory
    holding ``config.json``; a bare ``org/name`` is a Hugging Face hub id and is left to SGLang.

    Raises:
        ConfigError: one line naming the pool, the key and the path.
    """
    wanted = None if pools is None else set(pools)
    for pool in cfg.pools:
        if pool.engine is None or (wanted is not None and pool.name not in wanted):
            continue
        for key in ("model_path", "speculative_draft_model_path"):
            value = getattr(pool.engine, key)
            if not value or (_HUB_ID.match(value) and not Path(value).exists()):
                continue
            path = Path(value).expanduser()
            if not path.is_dir():
                raise ConfigError(f"pools[{pool.name}].engine.{key}: no such directory: {value} "
                                  "(`specgate serve` would start SGLang on it)")
            if not (path / "config.json").is_file():
                raise ConfigError(f"pools[{pool.name}].engine.{key}: {value} holds no config.json "
                                  "(not a model directory)")


def _fail(command: str, exc: BaseException) -> int:
    print(f"specgate {command}: {exc}", file=sys.stderr)
    return 2


def _router(args: argparse.Namespace) -> int:
    from router.app.asgi import tune_interpreter
    from router.app.server import serve

    try:
        cfg = load_config(args.config)
        check_paths(cfg)
    except ConfigError as exc:
        return _fail("router", exc)
    logging.basicConfig(level=logging.INFO, format="%(message)s" if args.json_logs else
                        "%(asctime)s %(levelname)s %(name)s %(message)s")
    tune_interpreter()
    host = args.host or cfg.server.host
    port = args.port if args.port is not None else cfg.server.port
    code = serve(args.config, host, port)
    # End here, skipping the interpreter's teardown: native extensions the tokenizer stack
    # loads (triton's nanobind modules) print hundreds of "leaked" lines at finalisation,
    # which would bury the drain's log line.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def effective_config(cfg: Config) -> dict[str, Any]:
    """The config as ``config check`` prints it: JSON values, every secret masked (keys as
    ``**********``, the Redis URL's password as ``****``), each pool's effective limits added.

    In the form of the file: a one-model config as ``model``, ``limits``, ``pools``, ``routing``
    at the top level; several models as ``models: [{name, ..., limits, pools, routing}]``."""
    effective = cfg.model_dump(mode="json")
    effective["state"]["redis_url"] = mask_url(cfg.state.redis_url)
    for pool in cfg.pools:
        for model in effective["models"]:
            for item in model["pools"]:
                if item["name"] == pool.name:
                    item["effective_max_context_tokens"] = cfg.pool_limit(pool)
                    item["effective_draft_reserved_tokens"] = pool.reserved_tokens if pool.speculative else 0
    if len(cfg.models) == 1:
        (model,) = effective.pop("models")
        one = {"limits": model.pop("limits"), "pools": model.pop("pools"), "routing": model.pop("routing")}
        effective = {"model": model, **one, **effective}
    return effective


def _config_check(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.path)
        if not args.no_paths:
            check_paths(cfg)
            check_engine_paths(cfg)
    except ConfigError as exc:
        return _fail("config check", exc)
    print(json.dumps(effective_config(cfg), indent=2, sort_keys=False))
    return 0


def _drain(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{args.port}/drain"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as resp:
            print(resp.read().decode())
    except (urllib.error.URLError, OSError) as exc:
        print(f"specgate drain: {url}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 1
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``router``, ``config check`` and ``drain`` on the ``specgate`` parser."""
    p = sub.add_parser("router", help="run the OpenAI-compatible router")
    p.add_argument("--config", required=True, help="the operator YAML (watched and reloaded on change)")
    p.add_argument("--host", default=None, help="address to listen on (default: server.host)")
    p.add_argument("--port", type=int, default=None, help="TCP port to listen on (default: server.port)")
    p.add_argument("--json-logs", action="store_true", help="log lines are bare JSON (no timestamp prefix)")
    p.set_defaults(func=_router)

    c = sub.add_parser("config", help="operator config tools")
    csub = c.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    check = csub.add_parser("check", help="validate a config file and print the effective config "
                                          "(secrets masked); exit 2 on error")
    check.add_argument("path", help="the operator YAML to check")
    check.add_argument("--no-paths", action="store_true",
                       help="skip the checks that the tokenizer directory, the key files and the "
                            "engines' model directories exist (for a config meant for another machine)")
    check.set_defaults(func=_config_check)

    d = sub.add_parser("drain", help="start the graceful drain of the router on this host "
                                     "(GET http://127.0.0.1:PORT/drain; the preStop hook)")
    d.add_argument("--port", type=int, default=8000, help="the router's TCP port (default 8000)")
    d.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the answer (default 5)")
    d.set_defaults(func=_drain)
