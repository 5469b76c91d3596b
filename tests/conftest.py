from __future__ import annotations

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
