"""A ConfigMap update reaches the router through the mounted volume (the kubelet's symlink swap).

The kubelet's layout of a ConfigMap volume (``pkg/volume/util/atomic_writer.go``)::

    /etc/specgate/..2026_01_02_03_04_05.000000001/config.yaml   the payload
    /etc/specgate/..data -> ..2026_01_02_03_04_05.000000001     swapped by rename(2)
    /etc/specgate/config.yaml -> ..data/config.yaml             never changes

An update writes a new timestamped directory, points a temporary ``..data_tmp`` link at it,
renames that over ``..data`` (atomic) and removes the old directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from serving.fake_sglang import FakeConfig, FakeServer
from tests.support import RouterServer, wait_until, write_router_yaml
from tests.support.k8s_cluster import CHAT, Cluster, base_config


class ConfigMapVolume:
    """A directory laid out and updated as the kubelet does."""

    def __init__(self, root: Path, text: str) -> None:
        self.root = root
        root.mkdir()
        self.n = 0
        self.current = self._write(text)
        os.symlink(self.current, root / "..data")
        os.symlink("..data/config.yaml", root / "config.yaml")

    @property
    def path(self) -> Path:
        return self.root / "config.yaml"

    def _write(self, text: str) -> str:
        self.n += 1
        name = f"..2026_01_02_03_04_{self.n:02d}.000000001"
        (self.root / name).mkdir()
        (self.root / name / "config.yaml").write_text(text)
        return name

    def update(self, text: str, *, same_mtime: bool = False) -> None:
        old = self.current
        old_mtime = os.stat(self.root / old / "config.yaml").st_mtime_ns
        new = self._write(text)
        if same_mtime:
            os.utime(self.root / new / "config.yaml", ns=(old_mtime, old_mtime))
        os.symlink(new, self.root / "..data_tmp")
        os.rename(self.root / "..data_tmp", self.root / "..data")
        (self.root / old / "config.yaml").unlink()
        (self.root / old).rmdir()
        self.current = new


@pytest.fixture
def plain(tokenizer_dir: Path) -> Any:
    with FakeServer(FakeConfig(model_name="tiny-llama", context_length=4096,
                               tokenizer_path=str(tokenizer_dir))) as srv:
        yield srv


def _static(tokenizer: Path, url: str, long_prompt: int, **extra: Any) -> str:
    doc = base_config(tokenizer, url, 1, **extra)
    doc["pools"] = [{"name": "plain", "speculative": False, "endpoints": [url]}]
    doc["routing"]["long_prompt_tokens"] = long_prompt
    return yaml.safe_dump(doc)


def test_symlink_swap_is_reloaded_and_invalid_update_keeps_last_good(
        tmp_path: Path, tokenizer_dir: Path, plain: FakeServer) -> None:
    vol = ConfigMapVolume(tmp_path / "specgate", _static(tokenizer_dir, plain.base_url, 1024))
    r = RouterServer(vol.path).start()
    try:
        wait_until(lambda: r.state.runtime.ready(), what="ready")
        first = r.state.runtime
        endpoint = first.endpoint(plain.base_url)
        # same size, same mtime: only the inode behind the links tells the swap
        vol.update(_static(tokenizer_dir, plain.base_url, 2000), same_mtime=True)
        wait_until(lambda: r.metric("specgate_config_reloads_total", result="success") == 1, what="reload")
        assert r.state.runtime is not first
        assert r.state.runtime.routing.long_prompt_tokens == 2000
        assert r.state.runtime.endpoint(plain.base_url) is endpoint  # health, in-flight kept

        good = r.state.runtime
        bad = yaml.safe_load(_static(tokenizer_dir, plain.base_url, 3000))
        bad["routing"]["saturation"] = {"enter": 4, "exit": 4}  # exit must be < enter
        vol.update(yaml.safe_dump(bad))
        wait_until(lambda: r.metric("specgate_config_reloads_total", result="failure") == 1, what="refusal")
        assert r.state.runtime is good and r.state.runtime.routing.long_prompt_tokens == 2000
        assert r.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 2,
                                         "messages": [{"role": "user", "content": "hi"}]}).status_code == 200

        vol.update("pools: [")  # not even YAML
        wait_until(lambda: r.metric("specgate_config_reloads_total", result="failure") == 2, what="refusal")
        assert r.state.runtime is good

        vol.update(_static(tokenizer_dir, plain.base_url, 1500))
        wait_until(lambda: r.metric("specgate_config_reloads_total", result="success") == 2, what="reload")
        assert r.state.runtime.routing.long_prompt_tokens == 1500
    finally:
        r.stop()


def test_reload_keeps_discovered_endpoints_and_follows_a_new_selector(cluster: Cluster) -> None:
    cluster.api.apply(cluster.slice("spec-a", {1: True}))
    cluster.api.apply(cluster.slice("spec-canary", {2: True}, **{"app.kubernetes.io/component": "pool-canary"}))
    r = cluster.start_router()
    wait_until(lambda: r.healthy() == {cluster.url(1)}, what="pod 1 healthy")
    kept = r.pool("spec").endpoints[cluster.url(1)]

    doc = yaml.safe_load(cluster.config_path.read_text())
    doc["routing"]["long_prompt_tokens"] = 900
    write_router_yaml(cluster.config_path, doc)
    wait_until(lambda: r.state.runtime.routing.long_prompt_tokens == 900, what="reload")
    assert r.pool("spec").endpoints == {cluster.url(1): kept} and kept.healthy
    assert r.client.post(CHAT, json={"model": "tiny-llama", "max_tokens": 2, "messages": [
        {"role": "user", "content": "hi"}]}).headers["x-specgate-pool"] == "spec"
    assert r.metric("specgate_discovery_lists_total", pool="spec") == 1  # the watch went on

    doc["pools"][0]["discovery"]["label_selector"] = "app.kubernetes.io/component=pool-canary"
    write_router_yaml(cluster.config_path, doc)
    wait_until(lambda: r.healthy() == {cluster.url(2)}, what="new selector's pods")
    assert set(r.pool("spec").endpoints) == {cluster.url(2)}
    assert r.metric("specgate_discovery_lists_total", pool="spec") == 2
