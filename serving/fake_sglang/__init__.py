"""A fake SGLang 0.5.23 server (package); see :mod:`serving.fake_sglang.app` for the contract."""

from serving.fake_sglang.app import (
    Behaviour,
    FakeConfig,
    FakeServer,
    FakeState,
    create_fake_app,
    main,
    overlength_body,
    run_fake_server,
    sglang_error_body,
    simple_chat_tokens,
    simple_text_tokens,
)

__all__ = [
    "Behaviour",
    "FakeConfig",
    "FakeServer",
    "FakeState",
    "create_fake_app",
    "main",
    "overlength_body",
    "run_fake_server",
    "sglang_error_body",
    "simple_chat_tokens",
    "simple_text_tokens",
]
