"""EAGLE-3 drafter for the tiny Llama target: data, model, training, export, evaluation.

- :mod:`drafters.eagle3.model`: the draft head in PyTorch, numerically SGLang's
  ``LlamaForCausalLMEagle3`` (``fc`` 3H -> H, ``midlayer``, ``norm``, ``lm_head`` over a
  reduced vocabulary with ``d2t``/``t2d``), training-time-test unroll, greedy chain drafting,
  export in the checkpoint format SGLang's ``--speculative-algorithm EAGLE3`` loads.
- :mod:`drafters.eagle3.data`: prompts from held-in / held-out stdlib files, target rollouts,
  hidden-state capture.
- :mod:`drafters.eagle3.train`: ``python -m drafters.eagle3.train --target ... --out ...``.
- :mod:`drafters.eagle3.evaluate`: offline acceptance per draft position and mean accepted
  length on held-out prompts (chain, greedy).

Sources: EAGLE-3 (Li et al. 2025, arXiv:2503.01840); SGLang 0.5.23
``python/sglang/srt/models/llama_eagle3.py``; SpecForge (github.com/sgl-project/SpecForge).
Submodules import torch; this package file does not.
"""
