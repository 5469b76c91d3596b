"""Deploy tests need Helm's SDK, kubectl, hadolint...: install them once, or fail loudly."""

from __future__ import annotations

import pytest

from . import k8s


@pytest.fixture(scope="session", autouse=True)
def _deploy_tools() -> None:
    try:
        k8s.ensure_tools()
    except k8s.ToolError as exc:  # never a skip: a missing tool is a failed test run
        pytest.fail(str(exc), pytrace=False)
