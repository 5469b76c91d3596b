"""Move router/'s flat modules into one package per layer, and every reference with them.

Run from the repository root of a clean checkout, then review and commit::

    python scripts/move_router.py            # git mv, __init__.py files, references, contracts, docs
    git add -A && git commit

Deterministic and re-runnable on a newer main: the move is :data:`MAPPING` (old module -> new
dotted path), applied to whatever the tree holds. It refuses to start (exit 1, nothing changed)
when a ``router/*.py`` is missing from :data:`MAPPING` (a module added since: give it a package),
when a :data:`MAPPING` entry names no file, when the tree is dirty or already moved, or when an
anchor of a hand edit (:data:`TEXT_EDITS`, the contracts, the docs section) is not found.

What it does, in order:

1. ``git mv router/<old>.py router/<package>/<new>.py`` for each entry, and writes each
   package's ``__init__.py`` (its docstring: what lives there and what it may import,
   :data:`PACKAGES`).
2. Rewrites every reference in every tracked text file (Python, Markdown, TOML, YAML, JSON,
   Helm templates, the Makefile): dotted module paths (``from router.x import``,
   ``import router.x``, ``mock.patch("router.x.y")``, ``python -m router.x``,
   ``:mod:`router.x```), file paths (``router/x.py``), and ``from router import <module>``.
   A Python name ``router`` bound to something else than the package (``router = Policy()``;
   then ``router.state`` is an attribute) is left alone.
3. Replaces router/'s import-linter contracts in ``pyproject.toml`` (:data:`CONTRACTS`) and the
   layers section of ``docs/architecture.md`` (generated from :data:`PACKAGES` and
   :data:`LAYERS`), and applies the few hand edits of :data:`TEXT_EDITS`.
4. Checks that no old reference is left and that every new module compiles.

``--refs-only FILE...`` applies step 2 alone to the named files (a branch begun before the
move: rewrite its files' references, then resolve the rest by hand).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

# --- the layout ---------------------------------------------------------------------------

#: Each package of router/ with its modules, top layer first. ``old:new`` renames a module
#: on the way (``pools:runtime``: ``router/pools.py`` -> ``router/state/runtime.py``).
_PACKAGE_MODULES: dict[str, str] = {
    "app": "app:asgi reload runtime_inputs tracing_reload commands server",
    "front": "api pipeline passthrough admin model_routes readiness request_kinds responses record "
             "planwindow context intake body encoding http_limits http_cycles drain",
    "loops": "scraper engine_reads warmup canary discovery tasks",
    "upstream": "proxy proxy_job transport transport_h1 transport_aiohttp upstream:relay observe specstats "
                "disconnect",
    "state": "fleet pools:runtime pool endpoint engine_limits models fleet_models identity engine_metrics "
             "snapshots snapshot_cache",
    "access": "auth admission engine_fields limits limit_rules limits_redis",
    "shared": "state redis_client breaker",
    "decision": "policy checks predict predicted affinity learn drift prediction_check acceptance bypass "
                "hysteresis prefix",
    "request": "parsing features template_shapes capabilities sampling",
    "ops": "metrics tracing spans trace",
    "config": "config:tree config_models:models config_overrides:overrides config_server:server "
              "config_pools:pools config_routing:routing config_limits:limits config_base:base",
}

#: Modules that stay at the top of router/: the entry point and the names at the bottom.
_TOP = ("cli", "errors", "reasons")


def _mapping() -> dict[str, str]:
    mapping = {f"router.{m}": f"router.{m}" for m in _TOP}
    for package, modules in _PACKAGE_MODULES.items():
        for item in modules.split():
            old, _, new = item.partition(":")
            mapping[f"router.{old}"] = f"router.{package}.{new or old}"
    return mapping


#: Old module -> new dotted path, for every module of router/ but ``__init__``.
MAPPING: dict[str, str] = _mapping()

#: The layers of router/, top to bottom (import-linter syntax inside ``containers = ["router"]``:
#: ``a | b`` are independent, neither imports the other).
LAYERS: tuple[tuple[str, str], ...] = (
    ("cli", "the `specgate` entry point (`python -m router.cli`); loads the sub-commands by name"),
    ("app", "composition and the process: create_app, AppState, reload, the server, the sub-commands"),
    ("front | loops", "one request's HTTP side | the background loops (neither imports the other)"),
    ("upstream", "the engine side of a request: the proxy, the HTTP seam and its clients, SSE"),
    ("state", "live state: the Runtime, pools, endpoints, the fleet, engine signals into snapshots"),
    ("access", "who may do what: API keys, priority, engine fields, the per-key limits"),
    ("shared | decision", "what replicas share through Redis | the pure routing decision"),
    ("request | ops", "a request made into the decision's inputs (pure) | metrics and traces"),
    ("config", "the operator YAML as one strict typed tree"),
    ("errors | reasons", "the names: the error tree, the decision reasons"),
)

#: Each package's docstring (its ``__init__.py``; docs/architecture.md section 5 repeats it).
PACKAGES: dict[str, str] = {
    "app": (
        "The composition and the process. ``asgi`` builds everything in the lifespan "
        "(:func:`create_app`, :class:`AppState`, :class:`RouterApp`); ``reload`` watches the "
        "config file, builds a new runtime from ``runtime_inputs`` and swaps one reference (the "
        "``tracing`` section through ``tracing_reload``); ``server`` runs the app under uvicorn "
        "with the router's protocol, signals and drain; ``commands`` holds ``specgate router``, "
        "``specgate config check`` and ``specgate drain``. Only ``router/cli.py`` is above it; "
        "no package imports it at run time (``router.front``'s handlers name :class:`AppState` "
        "in annotations, under ``if TYPE_CHECKING:``)."),
    "front": (
        "One request's HTTP side, from the socket to the proxy: the routes (``api``: the "
        "generation routes' entry, the probes and the error handlers; ``passthrough``: the "
        "non-generation endpoints; ``admin``; ``model_routes``; ``readiness``), the generation "
        "pipeline and its steps (``pipeline``; the route kinds ``request_kinds`` and "
        "``responses``; the end of a response ``record`` and the planner's window "
        "``planwindow``), reading a request (``intake``, ``body``, ``encoding``; ``context``: "
        "what the error path knows of it), the wire (``http_limits``: a request head's limits "
        "as bytes arrive; ``http_cycles``) and the process drain (``drain``). Neither it nor "
        "``router.loops`` imports the other."),
    "loops": (
        "The background loops, one :class:`~router.loops.tasks.LoopTask` each, started in the "
        "app's lifespan: ``scraper`` (every endpoint's SGLang ``/metrics``; ``engine_reads``: "
        "its ``/v1/models`` and ``/server_info``), ``warmup`` (servable before routable), "
        "``canary`` (the live lossless canary) and ``discovery`` (a pool's endpoints from "
        "Kubernetes EndpointSlices). Neither it nor ``router.front`` imports the other."),
    "upstream": (
        "The engine side of one request: ``proxy`` relays it to its engine and the engine's "
        "bytes back, unbuffered, given a ``proxy_job``; the HTTP seam ``transport`` and its "
        "clients ``transport_h1`` (HTTP/1.1 on httptools' parser) and ``transport_aiohttp``; "
        "``relay`` (SSE framing, heartbeats, the deadline, failover signals); ``observe`` (a "
        "response's usage and ending, read as relayed); ``specstats`` (SGLang's per-request "
        "speculative statistics); ``disconnect`` (a client that left while its handler waits)."),
    "state": (
        "Live state, no I/O: one model's :class:`Runtime` (``runtime``: its pools, their "
        "snapshots and the decision's call), a pool (``pool``) and its endpoints (``endpoint``: "
        "health, in-flight leases, scraped load, back-pressure; ``engine_limits``: each "
        "endpoint's context bound), several models behind one router (``fleet``; ``models``: a "
        "request's model and adapters; ``fleet_models``), what each engine serves and reports "
        "(``identity``; ``engine_metrics``: the ``/metrics`` text parsed, pure) and the one door "
        "from engine signals to the policy's inputs (``snapshots``, reused through "
        "``snapshot_cache``)."),
    "access": (
        "Who may do what: client and admin API keys (``auth``), who may set the engine's "
        "``priority`` (``admission``), the engine-internal fields a client must not set "
        "(``engine_fields``), and the per-key limits: their rules without I/O (``limit_rules``: "
        "a key's buckets, the GCRA check), the limiter (``limits``) and its Redis scripts "
        "(``limits_redis``)."),
    "shared": (
        "What router replicas share through Redis: in-flight leases, bypass flags and routing "
        "overrides (``state``: in memory or in Redis, :func:`build_shared_state`), the Redis "
        "client with its topology and error kinds (``redis_client``) and the circuit breaker in "
        "front of it (``breaker``). Neither it nor ``router.decision`` imports the other."),
    "decision": (
        "The routing decision, pure (no I/O, no clock): :func:`decide` and the snapshot types "
        "(``policy``: :class:`PoolSnapshot`, :class:`EndpointSnapshot`, :class:`Rules`), one "
        "small function per rule of the speculative pool (``checks``), a request's predicted "
        "completion time (``predict``) and the choice among pools by it (``predicted``, "
        "``affinity``), the speed models learned from finished requests (``learn``, ``drift``, "
        "``prediction_check``), live acceptance per temperature class (``acceptance``), the "
        "bypass flags and their hysteresis steps (``bypass``, ``hysteresis``) and the "
        "prefix-cache-aware endpoint choice (``prefix``)."),
    "request": (
        "A request's document made into the decision's inputs, pure: chat and completions "
        "bodies validated (``parsing``), its features: prompt tokens, output budget, ``n`` "
        "(``features``; chat renders by message shape in ``template_shapes``), what it needs "
        "from the engine that serves it (``capabilities``) and its sampling controls "
        "(``sampling``). Neither it nor ``router.ops`` imports the other."),
    "ops": (
        "What operators watch: every ``specgate_`` Prometheus series (``metrics``), "
        "OpenTelemetry traces (``tracing``; ``spans``: ending a span) and a client's W3C "
        "Trace Context headers (``trace``)."),
    "config": (
        "The operator YAML as one frozen, strict, typed tree, pure: the root, its loading and "
        "cross-field checks (``tree``: :class:`Config`, :func:`load_config`, re-exporting the "
        "sections' names), the sections (``models``; ``pools``; ``routing``; ``server``: the "
        "router process; ``limits``: ``auth.rate_limits``; ``overrides``: routing thresholds "
        "changed at run time) and their building blocks (``base``)."),
}

#: One line per package: the table of docs/architecture.md section 5.
SUMMARY: dict[str, str] = {
    "app": "`create_app` and `AppState`, the config reload, the server process, the sub-commands",
    "front": "the routes, the request pipeline and its steps, reading a request, head limits, drain",
    "loops": "the background loops: scraper and engine reads, warm-up, canary, Kubernetes discovery",
    "upstream": "the proxy, the HTTP seam and its clients, the SSE relay, usage and speculative stats",
    "state": "the `Runtime`, pools, endpoints, the fleet and its models, engine signals into snapshots",
    "access": "API keys, who may set `priority`, engine-internal fields, per-key limits",
    "shared": "what replicas share through Redis: leases, bypass flags, overrides",
    "decision": "the pure decision: policy, checks, prediction, learning, acceptance, prefix",
    "request": "parsing, features and token counts, capabilities, sampling (pure)",
    "ops": "Prometheus metrics, OpenTelemetry traces, W3C trace headers",
    "config": "the operator YAML as one frozen, strict, typed tree (pure)",
}

#: The layers inside a package, where they say something: each package with its own
#: layers contract (import-linter syntax, containers = the package).
PACKAGE_LAYERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "app": ("the sub-commands > the server > the app > the reload > its inputs",
            ("commands", "server", "asgi", "reload", "runtime_inputs | tracing_reload")),
    "config": ("the root > the sections > the sections they build on > the building blocks",
               ("tree", "models | overrides | server", "pools | routing | limits", "base")),
}

#: Pure modules: none imports, even through others, a web or network library or an I/O module.
PURE = ("router.decision", "router.request", "router.config", "router.errors", "router.reasons",
        "router.access.admission", "router.access.engine_fields", "router.access.limit_rules",
        "router.front.body", "router.front.readiness", "router.front.responses",
        "router.state.engine_metrics", "router.state.models", "router.state.identity",
        "router.state.models", "router.state.snapshots")
IO_MODULES = ("router.app", "router.front.api", "router.front.pipeline", "router.loops",
              "router.upstream", "router.shared", "router.state.runtime", "router.state.endpoint",
              "router.ops.metrics")
IO_LIBRARIES = ("aiohttp", "fastapi", "starlette", "httpx", "uvicorn", "redis", "kubernetes",
                "prometheus_client", "opentelemetry")

#: The import-linter contracts this move replaces (by name; all must be found).
OLD_CONTRACTS = (
    "router: no import cycle between its modules",
    "router: layers (a module imports only its own layer or lower ones; every module is placed)",
    "router: the pure modules and the config do no network or web I/O",
)


def _toml_list(items: Iterable[str], indent: str = "  ") -> str:
    return "[\n" + "".join(f'{indent}"{item}",\n' for item in items) + "]"


def contracts() -> str:
    """router/'s import-linter contracts (TOML), replacing :data:`OLD_CONTRACTS`."""
    layers = "".join(f'  # {why}\n  "{layer}",\n' for layer, why in LAYERS)
    acyclic = ('[[tool.importlinter.contracts]]\n'
               'name = "router: no import cycle between its packages, nor between the modules of one package"\n'
               'type = "acyclic_siblings"\nancestors = ["router"]\n')
    by_layer = ('[[tool.importlinter.contracts]]\n'
                'name = "router: packages by layer (a package imports only its own layer\'s and lower ones; '
                'every package and top-level module is placed)"\n'
                'type = "layers"\ncontainers = ["router"]\nexhaustive = true\n'
                f'layers = [\n{layers}]\n')
    out = [acyclic, by_layer]
    for package, (why, layers_in) in PACKAGE_LAYERS.items():
        out.append('[[tool.importlinter.contracts]]\n'
                   f'name = "router.{package}: {why}"\n'
                   f'type = "layers"\ncontainers = ["router.{package}"]\nexhaustive = true\n'
                   f'layers = {_toml_list(layers_in)}\n')
    out.append('[[tool.importlinter.contracts]]\n'
               'name = "router: the pure packages and modules do no network or web I/O"\n'
               'type = "forbidden"\n'
               f'source_modules = {_toml_list(PURE)}\n'
               f'forbidden_modules = {_toml_list(IO_LIBRARIES + IO_MODULES)}\n')
    return "\n".join(out)


def _package_init(package: str) -> str:
    return f'"""{_wrap(PACKAGES[package], 96)}\n\n{_wrap(_may_import(package), 96)}\n"""\n'


def _may_import(package: str) -> str:
    order = [[name.strip() for name in layer.split("|")] for layer, _ in LAYERS]
    level = next(i for i, names in enumerate(order) if package in names)
    below = [name for names in order[level + 1:] for name in names]
    return ("May import the layers below it (``pyproject.toml``'s ``[tool.importlinter]``): "
            + ", ".join(f"``{name}``" for name in below) + "; never one above.")


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines)


# --- docs/architecture.md section 5 -------------------------------------------------------

_DOCS = Path("docs/architecture.md")
_DOCS_START = re.compile(r"^## \d+\. Layers.*$", re.MULTILINE)
_DOCS_END = "When the lint fails"
#: sha256 of the section this script was written against (a different one is reported).
_DOCS_SHA = "684ec30d795a"


def docs_section(heading: str) -> str:
    """The layers section of docs/architecture.md, from its heading to "When the lint fails"."""
    rows = []
    for number, (layer, _) in enumerate(LAYERS, start=1):
        for name in (n.strip() for n in layer.split("|")):
            if name in _TOP:
                rows.append(f"| {number} | `router/{name}.py` | {_TOP_WHAT[name]} |")
            else:
                rows.append(f"| {number} | `router/{name}/` ({_count(name)} modules) | "
                            f"{SUMMARY[name]} |")
    table = "\n".join(rows)
    paragraphs = "\n".join(
        _wrap(f"- **`router/{name}/`**: {_md(PACKAGES[name])} {_md(_may_import(name))}", 96).replace("\n", "\n  ")
        for name in PACKAGES)
    return f"""{heading}

router/ is one package per layer; `lint-imports` (import-linter, `[tool.importlinter]` in
`pyproject.toml`) holds them to this order, top to bottom. A package imports its own modules and
the packages of lower layers, never one above; the two packages of a line with `|` import
neither each other; every package and top-level module of router/ must be placed (a new one
fails the lint until it is); no two packages import each other, directly or through others, and
no two modules of one package either. `router.app` and `router.config` also hold their own
modules to an order (`pyproject.toml`). Only imports that run count: an import under
`if TYPE_CHECKING:` (for an annotation) is not a dependency; the one such import that points up
is `router.front`'s handlers naming `AppState` (`router/app/asgi.py`).

| layer (top to bottom) | package | what lives there |
|---|---|---|
{table}

{paragraphs}

A second contract forbids the pure packages (`router.decision`, `router.request`,
`router.config`), the names and the pure modules of the others (`access.admission`,
`access.engine_fields`, `access.limit_rules`, `front.body`, `front.readiness`, `front.responses`,
`state.engine_metrics`, `state.fleet_models`, `state.identity`, `state.models`,
`state.snapshots`) to import, even through other modules, `aiohttp`, `fastapi`, `starlette`,
`httpx`, `uvicorn`, `redis`, `kubernetes`, `prometheus_client`, `opentelemetry` or the I/O
modules (`router.app`, `router.front.api`, `router.front.pipeline`, `router.loops`,
`router.upstream`, `router.shared`, `router.state.runtime`, `router.state.endpoint`,
`router.ops.metrics`). Between the packages of the repository: `loadtests` > `drafters` >
`serving` > `router`; router/ imports none of the others (the `specgate` CLI loads their
sub-commands by name, `router/cli.py`). `serving/cpu/kernels` (the `sgl_kernel` stand-in the CPU
engine imports from `sys.path`) is a package so the contract sees it: the lossless verifier it
calls lives in `serving/verifier.py`, below `drafters`.

"""


_TOP_WHAT = {
    "cli": "the `specgate` command line: loads each folder's sub-commands by name",
    "errors": "one exception tree, mapped to OpenAI-style error JSON in one place",
    "reasons": "the one table of decision reasons and capability kinds",
}


def _count(package: str) -> int:
    return sum(1 for new in MAPPING.values() if new.startswith(f"router.{package}."))


def _md(text: str) -> str:
    """reST inline markup as Markdown: ``x`` -> `x`, :class:`x` -> `x`."""
    text = re.sub(r":(?:func|class|mod|data):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


# --- hand edits: prose that names modules without a path ------------------------------------

#: (file, text after the rewrite, replacement): each must be found exactly once.
TEXT_EDITS: tuple[tuple[str, str, str], ...] = (
    ("README.md",
     ("| `router/` | the FastAPI router: `config.py` (strict operator YAML), `features.py` "
      "(validation, token counting), `policy.py` (the pure decision), `pools.py` (health, "
      "leases, hysteresis), `scraper.py` (SGLang `/metrics`), `proxy.py` (unbuffered relay, "
      "failover, abort on disconnect), `api.py`, `errors.py`, `metrics.py`, `reload.py` |"),
     ("| `router/` | the FastAPI router, one package per layer (docs/architecture.md, "
      '"Layers"): `app/` (`create_app`, reload, the server), `front/` (the routes and the '
      "request pipeline), `loops/` (scraper of SGLang `/metrics`, warm-up, canary, discovery), "
      "`upstream/` (unbuffered relay, failover, abort on disconnect), `state/` (the runtime, "
      "pools, endpoints: health, leases, hysteresis), `access/` (API keys, limits), `shared/` "
      "(Redis), `decision/` (the pure decision), `request/` (validation, token counting), "
      "`ops/` (metrics, traces), `config/` (strict operator YAML), `errors.py`, `reasons.py` |")),
    ("tests/unit/test_outside_imports.py",
     '"m.py:6: router.loops.scraper (not in router.__all__)"',
     '"m.py:6: router.loops (not in router.__all__)"'),
    # a revision from before router/__init__.py named its surface has the flat router/app.py
    ("benchmarks/request_cost.py",
     'importlib.import_module("router.app.asgi").create_app',
     'importlib.import_module("router.app").create_app'),
    ("docs/architecture.md",
     ("`Drainer.begin` (SIGTERM/SIGINT via `server.py` -> `Drainer.on_signal`"),
     ("`Drainer.begin` (SIGTERM/SIGINT via `router/app/server.py` -> `Drainer.on_signal`")),
    ("docs/architecture.md",
     ("`router/config/tree.py` or a `router/config_*.py` (e.g.\n  `config_pools.py` for "
      "`pools[]`, `config_routing.py` for `routing`;"),
     ("`router/config/tree.py` or a section's module in `router/config/` (e.g.\n  `pools.py` "
      "for `pools[]`, `routing.py` for `routing`;")),
    ("docs/architecture.md",
     ("The config tree is spread over `router/config/tree.py` and `router/config_*.py` (base\n  "
      "types, pools, routing, overrides, server) with every name re-exported by "
      "`router.config.tree`;\n  an endpoint's state is `router/state/endpoint.py`, pools and "
      "the runtime `router/state/runtime.py`."),
     ("The config tree is spread over `router/config/` (the root `tree.py`; base\n  types, "
      "pools, routing, overrides, server) with every name re-exported by "
      "`router.config.tree`;\n  an endpoint's state is `router/state/endpoint.py`, a pool "
      "`router/state/pool.py`, the runtime `router/state/runtime.py`.")),
)

# --- the rewrite ----------------------------------------------------------------------------

_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".tpl", ".txt", ".cfg", ".ini", ".sh",
             ".rst", ".Dockerfile", ""}
_SELF = Path("scripts/move_router.py")


def _alternation(names: Iterable[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))


_OLD = sorted(k.removeprefix("router.") for k, v in MAPPING.items() if k != v)
#: ``router.<old>`` not inside a longer name (``app.router.state`` is an attribute); after a
#: ``\n`` or ``\t`` escape in a string literal too.
_DOTTED = re.compile(rf"(?:(?<![\w.])|(?<=\\[nt]))router\.({_alternation(_OLD)})(?!\w)")
_PATH = re.compile(rf"(?:(?<![\w.-])|(?<=\\[nt]))router/({_alternation(_OLD)})\.py(?!\w)")


_NEW_MODULES = frozenset(MAPPING.values())
_NEXT_NAME = re.compile(r"\.(\w+)")


def _new(old: str) -> str:
    return MAPPING[f"router.{old}"]


def _already_new(match: re.Match[str]) -> bool:
    """Whether a match of :data:`_DOTTED` is the start of a new path (``router.state.runtime``:
    ``state``, ``config`` and ``upstream`` are old modules and new packages)."""
    old = match.group(1)
    if old not in PACKAGES:
        return False
    after = _NEXT_NAME.match(match.string, match.end())
    return after is not None and f"router.{old}.{after.group(1)}" in _NEW_MODULES


def _module_router_binding(tree: ast.AST) -> tuple[bool, bool]:
    """(the file binds ``router`` to the package, the file binds ``router`` to something else)."""
    module = other = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None and (alias.name == "router" or alias.name.startswith("router.")):
                    module = True
                elif alias.asname == "router":
                    other = True
        elif _binds_router_otherwise(node):
            other = True
    return module, other


def _binds_router_otherwise(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return any((a.asname or a.name) == "router" for a in node.names)
    if isinstance(node, ast.Name):
        return node.id == "router" and isinstance(node.ctx, ast.Store)
    if isinstance(node, ast.arg):
        return node.arg == "router"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == "router"
    return False


def _offsets(text: str) -> list[int]:
    starts, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        starts.append(pos)
    return starts


def _protected(text: str, path: str) -> set[int]:
    """Character offsets of ``router.<module>`` attributes on a ``router`` that is no package."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise SystemExit(f"move_router: {path} does not parse: {exc}") from None
    module, other = _module_router_binding(tree)
    if module and other:
        raise SystemExit(f"move_router: {path} binds `router` to the package and to something else: "
                         "rename the variable first")
    if module:
        return set()
    starts = _offsets(text)
    return {starts[n.lineno - 1] + n.col_offset for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "router"}


def _from_router_imports(text: str) -> str:
    """``from router import <module>`` -> ``from router.<package> import <new> as <module>``."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.module == "router" and node.level == 0):
            continue
        moved = [a for a in node.names if a.name in _OLD]
        if not moved:
            continue
        kept = [a for a in node.names if a.name not in _OLD]
        indent = lines[node.lineno - 1][:node.col_offset]
        out = []
        if kept:
            out.append("from router import " + ", ".join(
                a.name + (f" as {a.asname}" if a.asname else "") for a in kept))
        for alias in moved:
            parent, leaf = _new(alias.name).rsplit(".", 1)
            bound = alias.asname or alias.name
            out.append(f"from {parent} import {leaf}" + (f" as {bound}" if bound != leaf else ""))
        edits.append((node.lineno, node.end_lineno or node.lineno, indent, out))
    for first, last, indent, out in sorted(edits, reverse=True):
        lines[first - 1:last] = [f"{indent}{line}\n" for line in out]
    return "".join(lines)


def rewrite(text: str, path: str) -> str:
    """``text`` of the file at ``path`` with every reference to a moved module rewritten."""
    if path.endswith(".py"):
        text = _from_router_imports(text)
        protected = _protected(text, path)
    else:
        protected = set()

    def dotted(match: re.Match[str]) -> str:
        if match.start() in protected or _already_new(match):
            return match.group(0)
        return _new(match.group(1))

    def file_path(match: re.Match[str]) -> str:
        return _new(match.group(1)).replace(".", "/") + ".py"

    return _PATH.sub(file_path, _DOTTED.sub(dotted, text))


def leftovers(text: str, path: str) -> list[str]:
    """Old references still in ``text`` (outside protected attributes)."""
    protected = _protected(text, path) if path.endswith(".py") else set()
    starts = _offsets(text)
    out = []
    for pattern in (_DOTTED, _PATH):
        for match in pattern.finditer(text):
            bare_package = pattern is _DOTTED and match.group(1) in PACKAGES and not _NEXT_NAME.match(
                text, match.end())  # `router.state`: the new package or the old module, unknown
            if match.start() not in protected and not _already_new(match) and not bare_package:
                line = next(i for i, s in enumerate(starts) if s > match.start())
                out.append(f"{path}:{line}: {match.group(0)}")
    if path.endswith(".py"):
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module == "router":
                out += [f"{path}:{node.lineno}: from router import {a.name}" for a in node.names if a.name in _OLD]
    return out


# --- running it -----------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def _text_files() -> list[str]:
    out = []
    for name in _git("ls-files", "-z").split("\0"):
        path = Path(name)
        if not name or path == _SELF or path.is_symlink() or not path.is_file():
            continue
        if path.suffix not in _SUFFIXES and path.name not in ("Makefile", "Dockerfile"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if "router" in text:
            out.append(name)
    return out


def _replace_contracts(text: str) -> str:
    lines = text.splitlines(keepends=True)
    header = "[[tool.importlinter.contracts]]\n"
    starts = [i for i, line in enumerate(lines) if line == header]
    blocks = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        for i in range(start + 1, end):
            if lines[i].startswith("[") and not lines[i].startswith("[[tool.importlinter"):
                end = i
                break
        name = re.search(r'^name = "(.*)"$', "".join(lines[start:end]), re.MULTILINE)
        blocks.append((start, end, name.group(1) if name else ""))
    old = [b for b in blocks if b[2] in OLD_CONTRACTS]
    missing = sorted(set(OLD_CONTRACTS) - {b[2] for b in old})
    if missing:
        raise SystemExit(f"move_router: pyproject.toml lacks the contracts {missing}: update OLD_CONTRACTS")
    for start, end, _ in reversed(old):
        tail = "\n" if end < len(lines) else ""
        lines[start:end] = [contracts() + tail] if start == old[0][0] else []
    return "".join(lines)


def _replace_docs(text: str) -> str:
    start = _DOCS_START.search(text)
    end = text.find(_DOCS_END, start.end()) if start else -1
    if start is None or end < 0:
        raise SystemExit(f"move_router: {_DOCS} has no 'Layers' section ending at '{_DOCS_END}'")
    old = text[start.start():end]
    sha = hashlib.sha256(old.encode()).hexdigest()[:12]
    if sha != _DOCS_SHA:
        print(f"move_router: note: {_DOCS}'s layers section changed since this script was written "
              f"(sha {sha}); it is replaced whole: check that nothing new in it is lost", file=sys.stderr)
    return text[:start.start()] + docs_section(start.group(0)) + text[end:]


def _apply_edits(texts: dict[str, str]) -> list[str]:
    errors = []
    for path, old, new in TEXT_EDITS:
        count = texts.get(path, "").count(old)
        if count != 1:
            errors.append(f"{path}: the edit's anchor is found {count} times: {old[:70]!r}...")
            continue
        texts[path] = texts[path].replace(old, new)
    return errors


def _sort_imports(paths: list[str], stage: bool = True) -> None:
    """Sort the rewritten import blocks again (ruff's isort rule, I001), then stage them."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        print("move_router: note: no ruff found: run `ruff check --select I001 --fix .`", file=sys.stderr)
        return
    subprocess.run([ruff, "check", "--quiet", "--select", "I001", "--fix", *paths], check=False)
    if stage:
        _git("add", *paths)


def preflight(allow_dirty: bool) -> None:
    problems = []
    if not Path("router/__init__.py").is_file() or not Path("pyproject.toml").is_file():
        raise SystemExit("move_router: run from the repository root")
    if not allow_dirty and _git("status", "--porcelain", "--untracked-files=no").strip():
        problems.append("the tree has uncommitted changes (commit or stash them, or --allow-dirty)")
    present = {p.stem for p in Path("router").glob("*.py")} - {"__init__"}
    unmapped = sorted(present - {k.removeprefix("router.") for k in MAPPING})
    if unmapped:
        problems.append("router modules missing from MAPPING (give each a package in _PACKAGE_MODULES): "
                        + ", ".join(f"router/{m}.py" for m in unmapped))
    gone = sorted(m for m in _OLD if m not in present)
    if gone:
        problems.append("MAPPING names modules that are not in router/: " + ", ".join(gone))
    done = sorted(p.name for p in Path("router").iterdir()
                  if p.is_dir() and p.name in PACKAGES and any(p.glob("*.py")))
    if done:
        problems.append(f"router/ already has the packages {done}: the move is done")
    news = list(MAPPING.values())
    if len(set(news)) != len(news):
        problems.append("two modules move to the same path")
    if problems:
        raise SystemExit("move_router: refusing to start:\n  " + "\n  ".join(problems))


def move(check: bool) -> None:
    files = _text_files()
    texts = {path: Path(path).read_text(encoding="utf-8") for path in files}
    new_texts = {path: rewrite(text, path) for path, text in texts.items()}
    new_texts["pyproject.toml"] = _replace_contracts(new_texts["pyproject.toml"])
    new_texts[str(_DOCS)] = _replace_docs(new_texts[str(_DOCS)])
    errors = _apply_edits(new_texts)
    if errors:
        raise SystemExit("move_router: refusing to start (hand edits):\n  " + "\n  ".join(errors))

    renamed: dict[str, str] = {}
    for old, new in MAPPING.items():
        if old == new:
            continue
        src = "router/" + old.removeprefix("router.") + ".py"
        dst = new.replace(".", "/") + ".py"
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        _git("mv", src, dst)
        renamed[src] = dst
    for package in PACKAGES:
        init = Path("router") / package / "__init__.py"
        init.write_text(_package_init(package), encoding="utf-8")
        _git("add", str(init))
    for path, text in new_texts.items():
        if text != texts[path]:
            Path(renamed.get(path, path)).write_text(text, encoding="utf-8")
    _git("add", "-A", "router", *[renamed.get(p, p) for p in new_texts if new_texts[p] != texts[p]])

    _sort_imports([renamed.get(p, p) for p in new_texts if new_texts[p] != texts[p] and p.endswith(".py")]
                  + [str(Path("router") / package / "__init__.py") for package in PACKAGES])
    left = [hit for path in _text_files() for hit in leftovers(Path(path).read_text(encoding="utf-8"), path)]
    if left:
        raise SystemExit("move_router: old references left:\n  " + "\n  ".join(left))
    if check:
        bad = subprocess.run([sys.executable, "-m", "compileall", "-q", "router"], check=False, capture_output=True,
                             text=True)
        if bad.returncode:
            raise SystemExit(f"move_router: router/ does not compile:\n{bad.stdout}{bad.stderr}")
    counts = {p: _count(p) for p in PACKAGES}
    print(f"move_router: moved {len(renamed)} modules into {len(PACKAGES)} packages "
          f"({', '.join(f'{p} {n}' for p, n in counts.items())}); "
          f"rewrote {sum(new_texts[p] != texts[p] for p in new_texts)} files. Review, then commit.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    parser.add_argument("--no-check", action="store_true", help="skip compiling router/ after the move")
    parser.add_argument("--refs-only", nargs="+", metavar="FILE",
                        help="only rewrite the references in these files (no move)")
    parser.add_argument("--docs-sha", action="store_true", help="print the docs section's sha and exit")
    args = parser.parse_args(argv)
    if args.docs_sha:
        text = _DOCS.read_text(encoding="utf-8")
        start = _DOCS_START.search(text)
        assert start is not None
        print(hashlib.sha256(text[start.start():text.find(_DOCS_END, start.end())].encode()).hexdigest()[:12])
        return 0
    if args.refs_only:
        for path in args.refs_only:
            text = Path(path).read_text(encoding="utf-8")
            Path(path).write_text(rewrite(text, path), encoding="utf-8")
        _sort_imports([p for p in args.refs_only if p.endswith(".py")], stage=False)
        return 0
    preflight(args.allow_dirty)
    move(check=not args.no_check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
