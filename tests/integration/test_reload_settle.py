"""A config file rewritten in place, in pieces, is reloaded once, whole: the reloader waits for
the file to settle (``router.app.reload.SETTLE_S``) instead of applying the half-written file, which
here parses as a valid config with default ``server`` and ``upstream`` sections."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from router.app.reload import SETTLE_S
from router.config.tree import parse_config
from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, router_config, write_router_yaml

#: The writer's pause between its two pieces (s): longer than a poll, shorter than the settle.
PAUSE_S = 0.15


def test_a_file_rewritten_in_pieces_is_applied_once_whole(tmp_path: Path, tokenizer_dir: Path) -> None:
    assert PAUSE_S < SETTLE_S
    with FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096)) as plain:
        doc = router_config(tokenizer_dir, plain_url=plain.base_url)
        path = write_router_yaml(tmp_path / "router.yaml", doc)
        router = RouterServer(path).start(ready=True, timeout=120)  # a loaded CI machine
        try:
            final = yaml.safe_load(yaml.safe_dump(doc))
            final["upstream"]["idle_timeout_s"] = 7.0
            text = yaml.safe_dump(final).encode()
            cut = text.index(b"\nserver:") + 1
            assert parse_config(yaml.safe_load(text[:cut])).upstream.idle_timeout_s != 7.0  # valid, but not it
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(text[:cut])
                f.flush()
                time.sleep(PAUSE_S)  # the duration is the test: a writer pausing mid-file
                f.write(text[cut:])
                f.flush()
            router.wait_reloads(1)
            router.wait_scrape_rounds(int(2 * SETTLE_S / 0.05))  # time for a second reload to show
            state = router.state
            assert (state.reloads_ok, state.reloads_failed) == (1, 0)
            assert state.runtime.config.upstream.idle_timeout_s == 7.0
            assert state.runtime.config.server.reload_interval_s == 0.1
        finally:
            router.stop()
