from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

import pytest

from tests.support.tokenizer import make_test_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tokenizer with a chat template (built once per session)."""
    return make_test_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``make test`` (SPECGATE_REQUIRE_SGLANG=1) the real-SGLang tests must run, not skip."""
    import importlib.util
    import os

    if os.environ.get("SPECGATE_REQUIRE_SGLANG") == "1" and importlib.util.find_spec("sglang") is None:
        raise pytest.UsageError("SPECGATE_REQUIRE_SGLANG=1 but SGLang is not installed (make cpu-engine)")


def _quiet_native_teardown() -> None:
    """Send the interpreter's native teardown output to /dev/null when triton was loaded.

    The tokenizer stack imports triton (transformers -> torch._dynamo -> triton), whose nanobind
    extension prints a "nanobind: leaked N instances/types/functions" report (about 30 lines)
    when the interpreter finalises after an in-process router ran: it comes after pytest's
    result line and buries it. nanobind offers no switch for it outside the extension
    (``nb::set_leak_warnings`` is compiled in, not exported), so do what triton does for its
    own compile workers (``triton/_compile_warmup_pool.py``): once the session has reported,
    close stderr for the rest of the teardown. Registered when this conftest is imported, so
    it runs after the atexit handlers registered later (LIFO) and before ``Py_Finalize``.
    """
    if "triton._C.libtriton" not in sys.modules:
        return
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


atexit.register(_quiet_native_teardown)
