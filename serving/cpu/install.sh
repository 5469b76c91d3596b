#!/usr/bin/env bash
# Install the real SGLang 0.5.23 server for CPU-only machines into an existing venv.
#
#   bash serving/cpu/install.sh VENV
#
# VENV must already hold the CPU build of torch 2.13.0 and this project's base dependencies
# (`make venv`). Steps, each idempotent:
#   1. pip install --no-deps the pins of serving/cpu/requirements.txt (sglang==0.5.23 and the
#      pure-Python packages it imports on CPU); --no-deps everywhere, so no CUDA torch or GPU
#      kernel wheel can come along;
#   2. make PyPI's (CUDA-linked) torchvision importable beside the CPU torch
#      (serving/cpu/patch_torchvision.py);
#   3. write VENV's site-packages/specgate_sglang_cpu.pth: when SGLANG_USE_CPU_ENGINE=1, it puts
#      serving/cpu/kernels on sys.path (the pure-PyTorch `sgl_kernel` stand-in) and installs the
#      boot hooks of serving/cpu/kernels/specgate_sglang_cpu.py; without that variable it does
#      nothing;
#   4. check: torch is still the CPU build, and SGLang's CPU engine sees the stand-in's ops.
# Exit status: 0 on success, 1 on any failure (with the failing step printed).
set -euo pipefail

log() { echo "[cpu-engine] $*"; }
die() { echo "[cpu-engine] ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: bash serving/cpu/install.sh VENV"
VENV=$1
PY="$VENV/bin/python"
[ -x "$PY" ] || die "no python at $PY (create the venv first: make venv)"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KERNELS="$HERE/kernels"
START=$(date +%s)

TORCH=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) || die "torch is not installed in $VENV"
case "$TORCH" in
  *+cpu) log "torch $TORCH (CPU build)";;
  *) die "torch $TORCH in $VENV is not the CPU build (expected 2.13.0+cpu)";;
esac

log "1/4 pip install --no-deps -r $HERE/requirements.txt"
"$PY" -m pip install --quiet --no-deps --disable-pip-version-check -r "$HERE/requirements.txt" \
  2> >(grep -v "^WARNING: Location 'file://" >&2) || die "pip install failed"

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
log "2/4 torchvision: $("$PY" "$HERE/patch_torchvision.py" "$SITE")"

log "3/4 writing $SITE/specgate_sglang_cpu.pth -> $KERNELS"
case "$KERNELS" in *"'"*) die "the checkout path contains a quote: $KERNELS";; esac
cat > "$SITE/specgate_sglang_cpu.pth" <<EOF
import os, sys; os.environ.get('SGLANG_USE_CPU_ENGINE') == '1' and '$KERNELS' not in sys.path and (sys.path.append('$KERNELS') or __import__('specgate_sglang_cpu').install())
EOF

log "4/4 checking"
"$PY" - <<'EOF' || die "check failed"
import torch
assert torch.__version__.endswith("+cpu"), torch.__version__
assert not torch.cuda.is_available()
EOF
SPECGATE_KERNELS="$KERNELS" SGLANG_USE_CPU_ENGINE=1 "$PY" -W ignore - <<'EOF' 2>/dev/null || die "SGLang does not see the sgl_kernel stand-in (run the check without 2>/dev/null to see why)"
import os
import sglang, sgl_kernel
from sglang.srt.utils import common
assert sglang.__version__ == "0.5.23", sglang.__version__
assert os.path.dirname(sgl_kernel.__path__[0]) == os.environ["SPECGATE_KERNELS"], sgl_kernel.__path__
assert common.cpu_has_amx_support(), "cpu_has_amx_support() is False"
print("[cpu-engine] sglang", sglang.__version__, "with sgl_kernel stand-in at", sgl_kernel.__path__[0])
EOF
log "done in $(( $(date +%s) - START )) s"
