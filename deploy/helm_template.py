"""``helm template`` with the Helm engine that ``make system-deps`` installs (no helm binary).

    .venv/bin/python deploy/helm_template.py RELEASE CHART [-n NS] [-f VALUES]... [--show-only T]
    .venv/bin/python deploy/helm_template.py specgate helm/specgate -f my-values.yaml --router-config

deploy/install-helm.sh installs Helm's Go SDK bound to Python (helm-python-sdk), not the
``helm`` CLI, so this script gives the operator guide's render steps the same engine the
tests use. Values files merge like Helm's (maps key by key, the later file wins; lists and
scalars are replaced whole), and the chart's values.schema.json is enforced. Output: every
rendered manifest (or the one named by ``--show-only``, e.g. ``templates/configmap.yaml``) as
YAML documents; ``--router-config`` prints the router's ``config.yaml`` itself, ready for
``specgate config check``. Exit status 1 with Helm's message when the chart refuses the values.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of two values documents: maps merge key by key, the rest is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="helm_template.py", description=__doc__.splitlines()[0])
    p.add_argument("release", help="release name (Helm's NAME)")
    p.add_argument("chart", help="chart directory, e.g. helm/specgate")
    p.add_argument("-n", "--namespace", default="default", help="release namespace (default: default)")
    p.add_argument("-f", "--values", action="append", default=[], help="a values file (repeatable; later wins)")
    p.add_argument("--show-only", default=None, help="print only this template, e.g. templates/configmap.yaml")
    p.add_argument("--router-config", action="store_true", help="print the router ConfigMap's config.yaml only")
    args = p.parse_args(argv)

    import helm_python

    values: dict[str, Any] = {}
    for path in args.values:
        values = merge(values, yaml.safe_load(Path(path).read_text()) or {})
    try:
        with helm_python.Chart.load(args.chart) as chart:
            manifests = chart.render(values, name=args.release, namespace=args.namespace)
    except helm_python.HelmError as exc:
        print(f"helm_template.py: {exc}", file=sys.stderr)
        return 1
    if args.router_config:
        for path in sorted(m for m in manifests if not m.endswith("NOTES.txt")):
            for doc in yaml.safe_load_all(manifests[path]):
                if doc and doc.get("kind") == "ConfigMap" and "config.yaml" in doc.get("data", {}):
                    sys.stdout.write(doc["data"]["config.yaml"])
                    return 0
        print("helm_template.py: no ConfigMap with a config.yaml was rendered", file=sys.stderr)
        return 1
    chosen = sorted(manifests)
    if args.show_only is not None:
        chosen = [m for m in chosen if m == args.show_only or m.endswith("/" + args.show_only)]
        if not chosen:
            print(f"helm_template.py: no template {args.show_only!r} in {args.chart}", file=sys.stderr)
            return 1
    for path in chosen:
        if path.endswith("NOTES.txt") or not manifests[path].strip():
            continue
        sys.stdout.write(f"---\n# Source: {path}\n{manifests[path].strip()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
