"""Chat prompts spliced from a template's per-shape pieces equal the real render, or are not used."""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from router.errors import InvalidRequest
from router.front.pipeline import size_prompt
from router.request.features import PromptCounter, parse_chat
from router.request.template_shapes import SLACK_TOKENS, ShapeRenders

ROLES = ("system", "user", "assistant")
PIECES = ["hello", " padded ", "", "é中🙂", "{{ x }}", "\ue000", "line\nbreak", "tab\t", "\n"]


class Template:
    """A sandboxed Jinja chat template as a render function, counting its renders."""

    def __init__(self, source: str) -> None:
        env = ImmutableSandboxedEnvironment()

        def boom(message: str) -> None:
            raise ValueError(message)

        env.globals["raise_exception"] = boom
        self._template = env.from_string(source)
        self.renders = 0

    def __call__(self, messages: list[dict[str, object]]) -> str:
        self.renders += 1
        return self._template.render(messages=messages, add_generation_prompt=True)


PLAIN = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"


def conversation(rng: random.Random) -> list[dict[str, str]]:
    return [{"role": rng.choice(ROLES), "content": "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4)))}
            for _ in range(rng.randint(1, 5))]


@pytest.mark.parametrize("seed", range(3))
def test_splices_equal_the_real_render_and_render_once_per_shape(seed):
    template = Template(PLAIN)
    shapes = ShapeRenders(template, verify_every=7)
    rng = random.Random(seed)
    for _ in range(300):
        messages = conversation(rng)
        assert shapes.text(messages) == template(messages)
    assert not shapes.disabled
    # every new shape: one real render and one placeholder render; the rest are splices (plus
    # every 7th checked, plus the test's own reference render per call)
    assert template.renders <= 300 + 2 * len(shapes) + 300 // 7 + 1


def test_the_served_template_splices_like_it_renders(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    rng = random.Random(5)
    spliced = 0
    for _ in range(200):
        msgs = conversation(rng)
        parsed = parse_chat({"messages": msgs}, max_n=8)
        got = counter.render(parsed, splice=True)
        assert got.texts == counter.render(parsed).texts
        spliced += got.spliced
    assert spliced > 150
    assert not counter.shapes.disabled


def test_a_trimming_template_splices_only_contents_without_edge_whitespace():
    template = Template("{% for m in messages %}[{{ m.role }}]{{ m.content | trim }}{% endfor %}")
    shapes = ShapeRenders(template, verify_every=1)
    padded = [{"role": "user", "content": "  hi  "}]
    assert shapes.text(padded) == "[user]hi"  # the fill returns the real render
    assert shapes.text(padded) is None        # the shape is kept as "render every time"
    assert shapes.text([{"role": "user", "content": "hi"}]) == "[user]hi"
    assert shapes.text([{"role": "user", "content": "yo"}]) == "[user]yo"
    assert not shapes.disabled and len(shapes) == 2


@pytest.mark.parametrize("source", [
    "{% for m in messages %}{{ m.content }}|{{ m.content }}{% endfor %}",           # each content twice
    "{% for m in messages %}{{ m.content | upper }}{% endfor %}",                    # transformed
    "{% for m in messages %}{{ m.content | tojson }}{% endfor %}",                   # escaped
    "{% for m in messages %}{% if m.content.startswith('<') %}!{% endif %}{{ m.content }}{% endfor %}",
])
def test_templates_that_do_not_paste_contents_verbatim_are_rendered(source):
    template = Template(source)
    shapes = ShapeRenders(template, verify_every=1000)
    messages = [{"role": "user", "content": "<b>bold</b>"}, {"role": "user", "content": "x"}]
    assert shapes.text(messages) == template(messages)  # the fill returns the real render
    assert shapes.text(messages) is None and shapes.text(messages) is None
    assert len(shapes) == 1 and not shapes.disabled


def test_a_content_branch_the_fill_missed_turns_splicing_off_at_the_next_check():
    template = Template("{% for m in messages %}{% if 'X' in m.content %}!{% endif %}{{ m.content }}{% endfor %}")
    shapes = ShapeRenders(template, verify_every=2)
    assert shapes.text([{"role": "user", "content": "a"}]) == "a"     # fill: kept
    assert shapes.text([{"role": "user", "content": "b"}]) == "b"     # splice 1
    assert shapes.text([{"role": "user", "content": "Xc"}]) == "!Xc"  # splice 2: checked, real text
    assert shapes.disabled and len(shapes) == 0
    assert shapes.text([{"role": "user", "content": "d"}]) is None


def test_a_template_that_raises_on_a_checked_splice_raises_and_turns_splicing_off():
    template = Template("{% for m in messages %}{% if m.content == 'boom' %}{{ raise_exception('no') }}"
                        "{% endif %}{{ m.content }}{% endfor %}")
    shapes = ShapeRenders(template, verify_every=1)
    assert shapes.text([{"role": "user", "content": "ok"}]) == "ok"
    with pytest.raises(ValueError, match="no"):
        shapes.text([{"role": "user", "content": "boom"}])
    assert shapes.disabled


def test_a_template_that_raises_for_a_shape_raises_each_time_and_keeps_nothing():
    template = Template("{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}"
                        "{% for m in messages %}{{ m.content }}{% endfor %}")
    shapes = ShapeRenders(template)
    for _ in range(2):
        with pytest.raises(ValueError, match="user first"):
            shapes.text([{"role": "assistant", "content": "hi"}])
    assert len(shapes) == 0 and not shapes.disabled


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "hi", "name": "bob"}],
    [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    [{"role": "user", "content": None}],
    [{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}],
])
def test_messages_beyond_role_and_content_are_not_spliced(messages):
    template = Template(PLAIN)
    shapes = ShapeRenders(template)
    assert shapes.text(messages) is None
    assert template.renders == 0


def test_none_fields_are_dropped_as_the_template_sees_them():
    template = Template(PLAIN)
    shapes = ShapeRenders(template)
    assert shapes.text([{"role": "user", "content": "a", "name": None}]) == "<|user|>a\n<|assistant|>"


def test_shapes_are_bounded_oldest_first():
    shapes = ShapeRenders(Template(PLAIN), max_shapes=2)
    for role in ROLES:
        shapes.text([{"role": role, "content": "x"}])
    assert len(shapes) == 2
    with pytest.raises(ValueError):
        ShapeRenders(Template(PLAIN), max_shapes=0)


def _size(counter: PromptCounter, doc: dict[str, object], flips: tuple[int, ...]) -> tuple[int, int | None, bool]:
    runtime = SimpleNamespace(counter=counter, flip_points=lambda max_new_tokens, n: flips)
    parsed = parse_chat(doc, max_n=8)
    with ThreadPoolExecutor(1) as pool:
        p, lower, rendered = asyncio.run(size_prompt(runtime, parsed, 100, pool))  # type: ignore[arg-type]
    return p, lower, rendered.spliced


def test_a_spliced_prompt_near_a_threshold_is_rendered_and_counted_exactly(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    doc = {"messages": [{"role": "user", "content": "hello there"}]}
    parsed = parse_chat(doc, max_n=8)
    real = counter.render(parsed)
    lo, hi = counter.bounds(real)
    exact = counter.exact(real)
    _size(counter, doc, ())  # fills the shape
    assert _size(counter, doc, (hi + SLACK_TOKENS + 1,)) == (hi, lo, True)   # far: spliced bounds
    assert _size(counter, doc, (hi + SLACK_TOKENS - 1,)) == (hi, lo, False)  # near: real render, bounds decide
    assert _size(counter, doc, (exact,)) == (exact, None, False)             # inside: exact count
    assert _size(counter, doc, (max(0, lo - SLACK_TOKENS),)) == (hi, lo, False)


def test_the_real_render_path_still_raises_invalid_request(tokenizer_dir):
    counter = PromptCounter(tokenizer_dir)
    with pytest.raises(InvalidRequest):
        counter.render_chat([])
