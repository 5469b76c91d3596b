"""What ``serving/cpu/install.sh`` sets up: the torchvision patch (unit) and, in a venv where
the CPU engine is installed, the ``.pth`` gating and the two boot hooks on real SGLang."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from serving.cpu.patch_torchvision import MARKER, patch

META = textwrap.dedent(
    '''
    import torch
    import torch.library

    # Ensure that torch.ops.torchvision is visible
    import torchvision.extension  # noqa: F401


    @torch.library.register_fake("torchvision::nms")
    def meta_nms(dets, scores, iou_threshold):
        pass


    @torch.library.register_fake("torchvision::qnms")
    def meta_qnms(dets, scores, iou_threshold):
        pass
    '''
)


def test_patch_torchvision_is_conditional_and_idempotent(tmp_path):
    target = tmp_path / "torchvision" / "_meta_registrations.py"
    target.parent.mkdir()
    target.write_text(META)
    assert patch(tmp_path).startswith("patched:")
    text = target.read_text()
    assert MARKER in text
    assert '@torch.library.register_fake("torchvision::' not in text
    assert text.count('@_specgate_register_fake_if_defined("torchvision::') == 2
    assert patch(tmp_path).startswith("already patched:")
    assert target.read_text() == text


def test_patch_torchvision_refuses_unknown_text(tmp_path):
    target = tmp_path / "torchvision" / "_meta_registrations.py"
    target.parent.mkdir()
    target.write_text(META.replace("torchvision::qnms", "torchvision::other"))
    with pytest.raises(ValueError, match="qnms"):
        patch(tmp_path)
    with pytest.raises(FileNotFoundError):
        patch(tmp_path / "missing")


PROBE = textwrap.dedent(
    """
    import importlib.util, json, os
    out = {"sgl_kernel": importlib.util.find_spec("sgl_kernel") is not None}
    if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        from sglang.srt.utils import common
        from sglang.srt.speculative import eagle_utils
        out["amx_path"] = common.cpu_has_amx_support()
        out["greedy_verify_at_t1"] = eagle_utils._verify_uses_greedy(
            is_all_greedy=False, is_cpu=True, is_hip=False, is_xpu=False,
            use_rejection_sampling=False)
        out["sampling_op"] = getattr(eagle_utils.tree_speculative_sampling_target_only,
                                     "__module__", None)
        out["renorm_ops"] = [getattr(eagle_utils.top_k_renorm_prob, "__module__", None),
                             getattr(eagle_utils.top_p_renorm_prob, "__module__", None)]
    print(json.dumps(out))
    """
)


def _probe(**env: str) -> dict:
    import json

    base = {k: v for k, v in os.environ.items() if k not in ("SGLANG_USE_CPU_ENGINE",)}
    res = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PROBE], env={**base, **env},
        capture_output=True, text=True, timeout=300, check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.sglang
def test_pth_exposes_stand_in_only_in_cpu_mode_and_hooks_apply():
    if importlib.util.find_spec("sglang") is None:
        pytest.skip("SGLang is not installed (run `make cpu-engine`)")
    site = Path(sys.executable).resolve().parents[1]
    if not list(Path(sys.prefix).glob("lib/python*/site-packages/specgate_sglang_cpu.pth")):
        pytest.skip(f"serving/cpu/install.sh has not run on {site}")
    assert _probe() == {"sgl_kernel": False}
    on = _probe(SGLANG_USE_CPU_ENGINE="1")
    assert on == {
        "sgl_kernel": True,
        "amx_path": True,
        "greedy_verify_at_t1": False,
        "sampling_op": "sgl_kernel.ops_spec",
        # a greedy + sampled batch verifies with top-k renormalisation (None crashed the engine)
        "renorm_ops": ["serving.verifier", "serving.verifier"],
    }
    stock = _probe(SGLANG_USE_CPU_ENGINE="1", SPECGATE_CPU_SAMPLED_VERIFY="0")
    assert stock["greedy_verify_at_t1"] is True and stock["sampling_op"] is None
    assert stock["renorm_ops"] == [None, None]
