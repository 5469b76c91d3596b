"""Non-text content parts never count as zero (router.request.features, model.multimodal)."""

from __future__ import annotations

import pytest

from router.config.tree import parse_config
from router.errors import InvalidRequest
from router.request.features import PromptCounter, parse_chat

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
VIDEO = {"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}
TEXT = {"type": "text", "text": "what is this?"}


def chat(*parts):
    return {"messages": [{"role": "user", "content": list(parts)}]}


@pytest.mark.parametrize("part", [IMAGE, AUDIO, VIDEO, {"type": "audio_url", "audio_url": {"url": "x"}},
                                  {"type": "input_image", "image_url": "x"}],
                         ids=["image_url", "input_audio", "video_url", "audio_url", "input_image"])
def test_text_only_model_refuses_non_text_parts(part):
    with pytest.raises(InvalidRequest) as info:
        parse_chat(chat(TEXT, part), max_n=8)
    assert (info.value.param, info.value.status) == ("messages", 400)
    assert part["type"] in info.value.message and "text-only" in info.value.message


def test_reasoning_parts_are_accepted_as_zero_tokens():  # SGLang drops them from the template
    parsed = parse_chat({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]},
                                      {"role": "user", "content": "hi"}]}, max_n=8)
    assert parsed.media_tokens == 0


@pytest.mark.parametrize("kind", ["file", "refusal", "image", "tool_reference"])
def test_unknown_part_types_are_400(kind):
    for media in (None, {"image": 10}):
        with pytest.raises(InvalidRequest) as info:
            parse_chat(chat(TEXT, {"type": kind, "text": "x"}), max_n=8, media=media)
        assert info.value.param == "messages" and "not supported" in info.value.message


def test_multimodal_model_counts_each_part_with_its_bound():
    media = {"image": 1200, "audio": 750}
    parsed = parse_chat(chat(TEXT, IMAGE, IMAGE, AUDIO), max_n=8, media=media)
    assert parsed.media_tokens == 2 * 1200 + 750
    assert parse_chat(chat(TEXT), max_n=8, media=media).media_tokens == 0
    with pytest.raises(InvalidRequest, match="without video input"):
        parse_chat(chat(TEXT, VIDEO), max_n=8, media=media)


def test_prompt_bounds_include_the_media_bound(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    media = {"image": 1200}
    with_image = counter.render(parse_chat(chat(TEXT, IMAGE), max_n=8, media=media))
    text_only = counter.render(parse_chat(chat(TEXT), max_n=8, media=media))
    lo, hi = counter.bounds(with_image)
    lo_t, hi_t = counter.bounds(text_only)
    assert (lo, hi) == (lo_t, hi_t + 1200)
    assert counter.exact(with_image) + 1200 <= hi


def test_config_multimodal_is_strict():
    base = {"model": {"name": "m", "tokenizer": "/tmp/t"}, "limits": {"max_context_tokens": 4096},
            "pools": [{"name": "plain", "speculative": False, "endpoints": ["http://p:1"]}],
            "routing": {"long_prompt_tokens": 1024, "saturation": {"enter": 8, "exit": 6}}}
    assert parse_config(base).model.media_tokens is None
    base["model"]["multimodal"] = {"image_tokens": 1280}
    assert parse_config(base).model.media_tokens == {"image": 1280}
    from router.config.tree import ConfigError
    for bad in ({"image_tokens": 0}, {"image_tokens": "1280"}, {"pixels": 3}):
        base["model"]["multimodal"] = bad
        with pytest.raises(ConfigError, match="multimodal"):
            parse_config(base)
