"""``benchmarks/drills.py``: the disconnect-storm drill, short, against the real router process
and fake engines that ignore disconnects: nothing fabricated, no lease left, no generation left
running, every closed request aborted upstream (docs/reliability.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_disconnect_storm_leaves_nothing_behind(tmp_path: Path, tokenizer_dir: Path) -> None:
    out = tmp_path / "drills.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "drills.py"), "--quick", "--drills", "storm",
                           "--seed", "3", "--tokenizer", str(tokenizer_dir), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["drills"]
    assert row["drill"] == "storm"
    assert {k: row[k] for k in ("fabricated", "bad_error", "hung", "leases_left", "orphans", "unaborted")} == {
        "fabricated": 0, "bad_error": 0, "hung": 0, "leases_left": 0, "orphans": 0, "unaborted": 0}
    assert row["client_closed"] > 0 and row["completed"] > 0
    assert row["sent"] == sum(row[k] for k in ("completed", "clean_error", "fabricated", "bad_error",
                                                 "transport_before", "transport_mid", "hung", "client_closed"))
