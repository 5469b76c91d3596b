"""``serving.ports``: local ports below the kernel's ephemeral range, checked free."""

from __future__ import annotations

import random
import socket

import pytest

from serving import ports
from serving.ports import PORT_RANGE_FLOOR, ephemeral_port_range, free_port


def test_ephemeral_port_range_reads_the_kernel_file(tmp_path):
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_port_range(f) == (40000, 50000)
    f.write_text("garbage\n")
    assert ephemeral_port_range(f) == (32768, 60999)
    assert ephemeral_port_range(tmp_path / "missing") == (32768, 60999)


def test_free_port_is_below_the_ephemeral_range_and_bindable(monkeypatch):
    low = 24000  # a range of the machine's own could start anywhere: this one is fixed
    monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (low, 60999))
    rng = random.Random(7)
    seen = [free_port(rng=rng) for _ in range(50)]
    assert all(PORT_RANGE_FLOOR <= p < low for p in seen) and len(set(seen)) > 40
    for p in seen[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", p))


class _Always:
    """A ``random.Random`` stand-in that draws ``port`` every time."""

    def __init__(self, port: int) -> None:
        self.port = port

    def randint(self, a: int, b: int) -> int:
        assert a <= self.port <= b
        return self.port


def test_a_bound_port_is_skipped_and_all_bound_raises():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", free_port()))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"no free port on 127.0.0.1 in {PORT_RANGE_FLOOR}-"):
            free_port(rng=_Always(taken), attempts=3)  # type: ignore[arg-type]


def test_a_kernel_range_starting_low_falls_back_to_port_zero(monkeypatch):
    real_low, real_high = ephemeral_port_range()
    monkeypatch.setattr(ports, "ephemeral_port_range", lambda: (PORT_RANGE_FLOOR + 10, 60999))
    port = free_port()
    assert real_low <= port <= real_high  # the kernel's choice, not one drawn below the floor
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
