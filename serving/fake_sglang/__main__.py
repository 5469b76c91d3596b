"""``python -m serving.fake_sglang``: serve one fake SGLang server (flags: ``--help``)."""

from serving.fake_sglang import main

main()
