"""``specgate router`` as a subprocess: a start that cannot succeed (invalid config, missing or
corrupt tokenizer, a busy port) prints one line, no traceback, and exits 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.config_docs import with_

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "router.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, check=False)


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_router_start_errors_are_one_line_and_exit_2(tmp_path, tokenizer_dir) -> None:
    bad = write(tmp_path / "bad.yaml", with_("routing.saturation.exit", 8))
    proc = run_cli("router", "--config", str(bad))
    assert proc.returncode == 2
    assert "saturation.exit" in proc.stderr and "Traceback" not in proc.stderr

    missing = write(tmp_path / "missing.yaml", with_("model.tokenizer", str(tmp_path / "nope")))
    proc = run_cli("router", "--config", str(missing))
    assert (proc.returncode, one_line(proc.stderr)) == (
        2, f"specgate router: model.tokenizer: no such directory: {tmp_path}/nope")

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        ok = write(tmp_path / "ok.yaml", with_("model.tokenizer", str(tokenizer_dir)))
        proc = run_cli("router", "--config", str(ok), "--port", str(port))
    assert (proc.returncode, one_line(proc.stderr)) == (
        2, f"specgate router: cannot listen on 127.0.0.1:{port}: Address already in use")


def test_router_corrupt_tokenizer_is_one_line_and_exit_2(tmp_path, tokenizer_dir) -> None:
    broken = tmp_path / "broken-tok"
    broken.mkdir()
    for f in tokenizer_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "tokenizer.json").write_text("{not json")
    path = write(tmp_path / "c.yaml", with_("model.tokenizer", str(broken)))
    proc = run_cli("router", "--config", str(path), "--port", "0")
    assert proc.returncode == 2
    assert one_line(proc.stderr).startswith("specgate router: ")
