from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_test_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny tokenizer with a chat template (built once per session)."""
    return make_test_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")
