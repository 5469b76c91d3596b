"""``python -m serving.fake_sglang``: the command line of one fake server."""

from __future__ import annotations

import argparse

from serving.fake_sglang.app import create_fake_app
from serving.fake_sglang.config import FakeConfig

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """``python -m serving.fake_sglang``: serve one fake until SIGINT/SIGTERM."""
    import uvicorn

    from serving import fake_sglang

    ap = argparse.ArgumentParser(
        prog="python -m serving.fake_sglang",
        description=(fake_sglang.__doc__ or "").split("\n")[0],
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-name", default="fake-model")
    ap.add_argument("--context-length", type=int, default=2048)
    ap.add_argument("--tokenizer", default=None, help="Hugging Face tokenizer directory")
    ap.add_argument(
        "--speculative",
        action="store_true",
        help="act as an EAGLE3 server (topk 1, 3 steps, 4 draft tokens)",
    )
    ap.add_argument("--spec-accept-length", type=float, default=None)
    ap.add_argument("--max-running-requests", type=int, default=None)
    ap.add_argument("--max-total-tokens", type=int, default=1 << 20)
    ap.add_argument("--decode-step-s", type=float, default=0.0)
    ap.add_argument("--prefill-delay-s", type=float, default=0.0)
    ap.add_argument("--dp-size", type=int, default=1)
    ap.add_argument("--metrics-prefix", default="sglang:", choices=["sglang:", "sglang_"])
    ap.add_argument("--prefix-cache-tokens", type=int, default=0,
                    help="radix-like prefix cache of this many tokens, with cache reports (0: off)")
    ap.add_argument("--prefill-s-per-token", type=float, default=0.0)
    ap.add_argument("--enable-lora", action="store_true")
    ap.add_argument("--lora-paths", nargs="*", default=[],
                    help="LoRA adapters, `<name>=<path>` or `<path>` (SGLang's format)")
    args = ap.parse_args(argv)
    cfg = FakeConfig(
        model_name=args.model_name,
        context_length=args.context_length,
        tokenizer_path=args.tokenizer,
        speculative_algorithm="EAGLE3" if args.speculative else None,
        spec_accept_length=(
            args.spec_accept_length
            if args.spec_accept_length is not None
            else (3.0 if args.speculative else 0.0)
        ),
        spec_accept_rate=0.5 if args.speculative else 0.0,
        max_running_requests=args.max_running_requests,
        max_total_num_tokens=args.max_total_tokens,
        decode_step_s=args.decode_step_s,
        prefill_delay_s=args.prefill_delay_s,
        dp_size=args.dp_size,
        metrics_prefix=args.metrics_prefix,
        prefix_cache_tokens=args.prefix_cache_tokens,
        prefill_s_per_token=args.prefill_s_per_token,
        enable_lora=args.enable_lora or bool(args.lora_paths),
        lora_paths=tuple(args.lora_paths),
    )
    uvicorn.run(
        create_fake_app(cfg),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=2,
    )
