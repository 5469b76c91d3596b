#!/usr/bin/env bash
# Make `redis-server` available for tests/redis, idempotently.
#
#   bash scripts/ensure-redis.sh
#
# Does nothing when redis-server is already on PATH. Otherwise installs Debian's
# `redis-server` package with apt-get (as root, or through sudo when available), without
# enabling or starting a system service: the tests start their own redis-server on a free
# 127.0.0.1 port with `--save '' --appendonly no` and stop it afterwards.
# Any failure exits non-zero: tests/redis never skips for a missing server.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "ensure-redis.sh: redis-server is missing and neither root nor sudo is available" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: the package must not start a system Redis on 6379 in containers.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=""
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod +x "$POLICY"
  CREATED_POLICY=1
fi
cleanup() { if [ -n "$CREATED_POLICY" ]; then $SUDO rm -f "$POLICY"; fi; }
trap cleanup EXIT

if ! $SUDO apt-get install -y --no-install-recommends redis-server >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y --no-install-recommends redis-server >/dev/null
fi

command -v redis-server >/dev/null 2>&1 || { echo "ensure-redis.sh: install failed" >&2; exit 1; }
redis-server --version
