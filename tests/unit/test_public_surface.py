"""``router``'s public surface: ``__all__`` names each public name once, each loads from the
module that defines it, each is documented in the package docstring."""

from __future__ import annotations

import importlib
import re

import pytest

import router


def test_all_is_the_surface() -> None:
    assert sorted(router.__all__) == sorted(router._SURFACE)  # each once (ruff keeps __all__ sorted)


@pytest.mark.parametrize("name", router.__all__)
def test_a_public_name_is_its_modules_object_and_documented(name: str) -> None:
    module = importlib.import_module(router._SURFACE[name])
    assert getattr(router, name) is getattr(module, name)
    assert re.search(rf":(func|class|data):`{name}`", router.__doc__ or ""), f"{name} is not in router's docstring"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Scraper'"):
        router.Scraper  # noqa: B018  (internal: router.loops.scraper)
    assert "create_app" in dir(router)
