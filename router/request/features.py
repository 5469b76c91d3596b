"""Request -> validated fields -> :class:`RequestFeatures` (prompt tokens, output budget, n).

Three steps, so that only the middle one touches the tokenizer and runs off the event loop:

1. :func:`~router.request.parsing.parse_chat` / :func:`~router.request.parsing.parse_completions`
   (:mod:`router.request.parsing`, re-exported here) validate the JSON document (pure, fast) into a
   :class:`ParsedRequest` and raise :class:`~router.errors.InvalidRequest` with ``param`` set
   on the first problem.
2. :class:`PromptCounter` counts prompt tokens with the served model's own tokenizer and
   chat template, mirroring SGLang 0.5.23's ``serving_chat._apply_jinja_template``: message
   ``None`` fields dropped, ``content: null`` rendered as ``""``, text parts of a content
   list joined with ``" "`` (the template's "string" content format), assistant tool-call
   ``arguments`` parsed from JSON, ``tools`` dumped in SGLang's ``Tool`` model shape and left
   out when ``tool_choice`` is ``"none"``, the template rendered with
   ``add_generation_prompt=True`` and then encoded without adding special tokens. Completion
   prompts are encoded as SGLang's tokenizer manager does (``tokenizer.encode(text)``).
   The count therefore equals SGLang's ``usage.prompt_tokens``; the documented margin is
   ``model``-independent and zero for text-only requests (checked against the real server
   in ``tests/sglang``). Non-text parts never count as zero: a text-only model (the default)
   refuses them with HTTP 400 (``param: messages``), and a model declared multimodal
   (``model.multimodal``) counts each with its per-part upper bound on top of the text, so the
   prompt size is then an upper bound, never an under-count.
3. :func:`router.decision.policy.request_features` applies the output-budget rule (a rule of the
   decision): ``max_completion_tokens`` if given, else ``max_tokens``, else
   ``min(limits.default_max_tokens, S - P)``, which the router then forwards as ``max_tokens``
   (SGLang 0.5.23 also prefers ``max_completion_tokens``, sgl-project/sglang#17516).

Boundary (SGLang 0.5.23 ``tokenizer_manager._validate_one_request``): an input is refused when
``P + reserved >= context_length`` and a request when ``P + reserved + max_new_tokens >
context_length``; so ``P + max_tokens == S`` is served, ``S + 1`` is not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from router.errors import InvalidRequest
from router.request.parsing import (
    CHAT_IDS_FIELD,
    MAX_TOP_LOGPROBS,
    ParsedRequest,
    check_envelope,
    check_top_logprobs,
    parse_chat,
    parse_completions,
    prompt_kind,
)
from router.request.template_shapes import ShapeRenders

if TYPE_CHECKING:
    from collections.abc import Callable

    import jinja2

__all__ = [  # the parser's names are re-exported (router.request.parsing defines them)
    "MAX_TOP_LOGPROBS",
    "ParsedRequest",
    "PromptCounter",
    "Rendered",
    "RequestFeatures",
    "TokensPerByte",
    "check_envelope",
    "check_top_logprobs",
    "fast_frozen_init",
    "needs_exact",
    "parse_chat",
    "parse_completions",
    "prompt_count",
]

def _tokens_phrase(prompt_tokens: int, lower: int | None, extra: int = 0) -> str:
    """``P + extra`` tokens as a true statement: exact, or "at least" the lower bound."""
    return str(prompt_tokens + extra) if lower is None else f"at least {lower + extra}"


_T = TypeVar("_T")


def fast_frozen_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass built once or more per request an ``__init__`` that
    sets each field through its slot's descriptor (``member_descriptor.__set__``) instead of
    ``object.__setattr__(self, name, value)``: the same parameters and defaults, the same
    object (still frozen: assigning a field raises ``FrozenInstanceError``), in about half the
    time (CPython 3.11 builds a frozen dataclass about five times slower than a plain one).
    Apply it above ``@dataclass(frozen=True, slots=True)``.

    Raises:
        TypeError: ``cls`` has a field outside ``__init__``, keyword-only or with a default
            factory, or a ``__post_init__`` (none of these is handled).
    """
    params, body, scope = [], [], {}
    for f in fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only or f.default_factory is not MISSING or hasattr(cls, "__post_init__"):
            raise TypeError(f"fast_frozen_init: {cls.__name__}.{f.name} is not a plain positional field")
        scope[f"_set_{f.name}"] = cls.__dict__[f.name].__set__  # the slot's descriptor
        if f.default is MISSING:
            params.append(f.name)
        else:
            scope[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})\n")
    # names only from the fields (identifiers), as dataclasses builds its own __init__
    exec(f"def __init__(self, {', '.join(params)}):\n{''.join(body)}", scope)  # noqa: S102
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields(cls)}, "return": None}  # type: ignore[arg-type]
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """What the routing decision sees of a request.

    Attributes:
        prompt_tokens: P, the prompt's length in tokens (the longest prompt of a batch).
        max_new_tokens: per-sequence output budget (tokens) the engine will be given.
        n: choices per prompt (``n``).
        num_prompts: prompts in a completions batch (1 for chat).
        stream: SSE requested.
        param: field named by over-length errors.
        budget_defaulted: True when the router chose the budget (it then forwards it).
        prompt_tokens_lower: None when ``prompt_tokens`` is the exact count; otherwise
            ``prompt_tokens`` is the byte-length upper bound and this is the lower bound
            (``lower <= P <= prompt_tokens``), used where no decision threshold lies between
            them (docs/performance.md, "Sizing a prompt").
        temperature_class: ``greedy`` or ``sampled`` (:func:`router.decision.acceptance.temperature_class`):
            the two accept draft tokens at very different rates.
        needs: the kinds the request needs from its pool
            (:func:`router.request.capabilities.required_features`).
        speculation: the client's speculation hint, ``off``/``auto``/``on``
            (:data:`router.request.capabilities.SPECULATION_MODES`).
        adapters: the LoRA adapters the request asks for (:mod:`router.state.models`; empty: the
            base model).
    """

    prompt_tokens: int
    max_new_tokens: int
    n: int = 1
    num_prompts: int = 1
    stream: bool = False
    param: str = "messages"
    budget_defaulted: bool = False
    prompt_tokens_lower: int | None = None
    temperature_class: str = "sampled"
    needs: frozenset[str] = frozenset()
    speculation: str = "auto"
    adapters: frozenset[str] = frozenset()
    #: Preferences, not needs (:func:`router.request.capabilities.preferred_features`): a pool that
    #: keeps them exactly is chosen first, the others stay fallbacks.
    prefers: frozenset[str] = frozenset()
    #: Where P is only bounded: the expected P (the rendered bytes times the model's learned
    #: tokens per byte, :class:`TokensPerByte`, within the bounds), for the speed prediction
    #: only (prefill, the batch's context, the acceptance bucket, the KV wait); every limit
    #: and rule reads :attr:`prompt_tokens`. None: :attr:`prompt_tokens` itself.
    prompt_tokens_estimate: int | None = None
    #: Bytes of the rendered prompt text (the longest prompt of a batch; 0: token ids).
    prompt_bytes: int = 0

    @property
    def prompt_exact(self) -> bool:
        """True when :attr:`prompt_tokens` is the exact count P."""
        return self.prompt_tokens_lower is None

    def prompt_phrase(self, extra: int = 0) -> str:
        """``"P + extra"`` as a true statement for messages: ``"1234"`` when exact,
        ``"at least 1200"`` (from the lower bound) when P was bounded, not counted."""
        return _tokens_phrase(self.prompt_tokens, self.prompt_tokens_lower, extra)

    @property
    def sequence_tokens(self) -> int:
        """Tokens one sequence may occupy: ``P + max_new_tokens``."""
        return self.prompt_tokens + self.max_new_tokens

    @property
    def weight(self) -> int:
        """KV weight of the request per prompt (tokens): ``P + n * max_new_tokens`` (each of
        the ``n`` choices decodes its own continuation)."""
        return self.prompt_tokens + self.n * self.max_new_tokens

    @property
    def predicted_prompt_tokens(self) -> int:
        """P for the speed prediction: :attr:`prompt_tokens_estimate`, else :attr:`prompt_tokens`."""
        return self.prompt_tokens if self.prompt_tokens_estimate is None else self.prompt_tokens_estimate

    @property
    def predicted_weight(self) -> int:
        """:attr:`weight` with :attr:`predicted_prompt_tokens` (the KV the request is expected to take)."""
        return self.predicted_prompt_tokens + self.n * self.max_new_tokens


class TokensPerByte:
    """A model's prompt tokens per rendered byte, learned from prompts whose count is known
    (exact counts, the engine's ``usage.prompt_tokens``), exponentially averaged over about
    ``memory`` of them; what turns a prompt's byte length into an expected P where the router
    did not count it (:meth:`estimate`). The byte bounds stay what limits read.

    Args:
        memory: observations the average spans (> 0).
    """

    __slots__ = ("_alpha", "count", "value")

    def __init__(self, memory: int = 200) -> None:
        if memory < 1:
            raise ValueError("memory must be >= 1")
        self._alpha = 1.0 / memory
        self.value: float | None = None
        self.count = 0

    def observe(self, tokens: int, size: int) -> None:
        """One prompt of ``size`` rendered bytes that is ``tokens`` tokens (ignored unless both > 0)."""
        if tokens <= 0 or size <= 0:
            return
        ratio = tokens / size
        self.value = ratio if self.value is None else self.value + self._alpha * (ratio - self.value)
        self.count += 1

    def estimate(self, size: int, lo: int, hi: int) -> int | None:
        """The expected tokens of a prompt of ``size`` bytes, within ``[lo, hi]``; None before
        any observation (then the bound stands)."""
        if self.value is None:
            return None
        return min(hi, max(lo, round(size * self.value)))


_FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")


def _tool_dump(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool in the shape SGLang 0.5.23 renders into templates (``Tool.model_dump()``).

    ``Function`` keeps the client's key order, drops unknown keys and ``strict`` /
    ``defer_loading`` when null, and appends ``description``/``name``/``parameters`` (null
    when absent); ``Tool`` always carries ``defer_loading`` (``protocol.py: Function._serialize``).
    """
    fn = tool["function"]
    defer = tool.get("defer_loading")
    values = {k: fn.get(k) for k in _FUNCTION_FIELDS}
    if values["defer_loading"] is None and defer is not None:
        values["defer_loading"] = defer
    for key in ("strict", "defer_loading"):
        if values[key] is None:
            del values[key]
    order = [k for k in fn if k in values]
    function = {k: values[k] for k in order + [k for k in values if k not in order]}
    return {"type": tool.get("type", "function"), "function": function, "defer_loading": defer}


def _template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for msg in messages:
        m = {k: v for k, v in msg.items() if v is not None}
        content = msg.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            m["content"] = " ".join(p["text"] for p in content if p.get("type") in ("text", "input_text"))
        if isinstance(m.get("tool_calls"), list):
            calls = []
            for call in m["tool_calls"]:
                call = dict(call)
                fn = dict(call["function"])
                if isinstance(fn.get("arguments"), str) and fn["arguments"].strip():
                    fn["arguments"] = json.loads(fn["arguments"])
                call["function"] = fn
                calls.append(call)
            m["tool_calls"] = calls
        out.append(m)
    return out


def _template_tools(doc: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = doc.get("tools")
    choice = doc.get("tool_choice")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        wanted = choice["function"].get("name")
        picked = [_tool_dump(t) for t in tools if t["function"]["name"] == wanted]
        return picked or None
    return [_tool_dump(t) for t in tools]


class PromptCounter:
    """Counts prompt tokens with the served model's tokenizer and chat template.

    Two stages, so that exact tokenisation (the expensive part: BPE over the whole prompt)
    runs only when the decision depends on it:

    1. :meth:`render` applies the chat template (or collects the completion prompts) and
       :meth:`bounds` turns the rendered text into ``lo <= P <= hi`` from its byte length:
       every token of a byte-level BPE (or SentencePiece with byte fallback) covers at least
       one byte of the text, so ``hi = bytes + added special tokens + 1``; no token covers
       more than ``max_token_bytes`` bytes (the longest vocabulary entry, UTF-8), so
       ``lo = ceil(bytes / max_token_bytes)``. Token-id prompts are exact (``lo == hi``).
    2. :meth:`exact` encodes the rendered text (call it from a worker thread).

    :func:`needs_exact` says whether any decision threshold lies in ``[lo, hi)``; if none
    does, every ``P`` in the interval gives the same decision and ``hi`` (an upper bound, so
    never an under-count against the cap) stands in for ``P``.

    Loading is slow (hundreds of ms): build one per tokenizer path and share it.

    Args:
        tokenizer_path: local directory with ``tokenizer.json``/``tokenizer_config.json``.

    Raises:
        OSError: when the tokenizer files cannot be loaded.
    """

    def __init__(self, tokenizer_path: str | Path) -> None:
        from transformers import AutoTokenizer

        self.path = str(tokenizer_path)
        self._tok = AutoTokenizer.from_pretrained(self.path, local_files_only=True)
        self.max_token_bytes = max(len(t.encode("utf-8")) for t in self._tok.get_vocab()) or 1
        #: Token ids a prompt may hold: ``[0, vocab_size)``, the tokenizer's ids with its added
        #: tokens (``len(tokenizer)``). A model's embedding table may be padded beyond it, but
        #: no text encodes to such an id, and one past the table would fail inside the engine.
        self.vocab_size = len(self._tok)
        self._added = self._tok.num_special_tokens_to_add(pair=False)
        self._special = dict(self._tok.special_tokens_map)
        self._compiled: dict[bool, tuple[jinja2.Template, dict[str, Any]] | None] = {}
        self.shapes = ShapeRenders(self.render_chat)

    def render(self, parsed: ParsedRequest, *, splice: bool = False) -> Rendered:
        """The prompt(s) as the engine will tokenise them (chat template applied).

        ``splice``: a plain chat may come from :attr:`shapes` (:mod:`router.request.template_shapes`:
        the template's pieces for the conversation's shape joined with its contents; then
        :attr:`Rendered.spliced`); event loop only. Exact counts take the real render.

        Raises:
            InvalidRequest: when the chat template rejects the conversation (e.g. a Jinja
                ``raise_exception``), as SGLang does with HTTP 400; a token id outside the
                vocabulary (a chat's ``input_ids``, a completions token-id prompt).
        """
        doc = parsed.doc
        if parsed.kind == "chat":
            if parsed.param == CHAT_IDS_FIELD:  # the engine runs these ids, not the template
                return Rendered(ids_len=self._check_vocab(doc[CHAT_IDS_FIELD], CHAT_IDS_FIELD))
            kwargs = doc.get("chat_template_kwargs")
            if splice and kwargs is None and not doc.get("tools"):
                text = self.shapes.text(doc["messages"])
                if text is not None:
                    return Rendered(texts=(text,), spliced=True)
            return Rendered(texts=(self.render_chat(doc["messages"], tools=_template_tools(doc),
                                                    template_kwargs=kwargs),), special=False,
                            media_tokens=parsed.media_tokens)
        prompt = doc["prompt"]
        kind = prompt_kind(prompt)
        if kind == "text":
            return Rendered(texts=(prompt,), special=True)
        if kind == "texts":
            return Rendered(texts=tuple(prompt), special=True)
        if kind == "ids":
            return Rendered(ids_len=self._check_vocab(prompt, "prompt"))
        return Rendered(ids_len=max(self._check_vocab(p, "prompt") for p in prompt))

    def _check_vocab(self, ids: list[int], param: str) -> int:
        """``len(ids)`` of a validated token-id list (:func:`router.request.parsing.token_ids`).

        Raises:
            InvalidRequest: an id at or above :attr:`vocab_size` (``param`` names the field).
        """
        top = max(ids)
        if top >= self.vocab_size:
            raise InvalidRequest(f"`{param}` holds token id {top}, outside this model's vocabulary "
                                 f"[0, {self.vocab_size})", param=param)
        return len(ids)

    def render_chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                    template_kwargs: dict[str, Any] | None = None) -> str:
        """``messages`` rendered with the chat template and the generation prompt."""
        kwargs = template_kwargs if isinstance(template_kwargs, dict) else {}
        try:
            chat = _template_messages(messages)
            compiled = None if kwargs or not chat else self._template(tools is not None)
            if compiled is not None:
                # What apply_chat_template(tokenize=False) does for one conversation without
                # template kwargs, minus its per-call set-up (about half its cost, docs/performance.md).
                # Template.render would merge the template's globals (a ChainMap over the
                # environment's) into a new dict per call and take the set of their names, about
                # two thirds of a small render; they are merged once (_template) and the context is
                # built on a copy of that, with the variables render's own context holds
                # (jinja2.runtime.new_context, Jinja 3.1).
                template, merged = compiled
                env = template.environment
                ctx = env.context_class(env, {**merged, "messages": chat, "tools": tools, "documents": None,
                                              "add_generation_prompt": True, **self._special},
                                        template.name, template.blocks, globals=merged)
                try:
                    return env.concat(template.root_render_func(ctx))
                except Exception:  # noqa: BLE001  as Template.render: the template's frames in the traceback
                    env.handle_exception()
            # tokenize=False: a str (transformers' overloads do not say so); its stubs want a
            # list of dicts or callables for ``tools``.
            hf_tools = cast("list[dict[Any, Any] | Callable[..., Any]] | None", tools)
            return cast(str, self._tok.apply_chat_template(chat, tools=hf_tools, tokenize=False,
                                                           add_generation_prompt=True, **kwargs))
        except Exception as exc:  # noqa: BLE001  jinja2 errors, TypeError... from templates (SGLang -> 400)
            raise InvalidRequest(f"the chat template rejected the messages: {str(exc)[:200]}",
                                 param="messages") from None

    def _template(self, with_tools: bool) -> tuple[jinja2.Template, dict[str, Any]] | None:
        """The compiled chat template transformers would pick and its globals merged into one
        dict (None: let ``apply_chat_template`` raise)."""
        if with_tools not in self._compiled:
            from transformers.utils.chat_template_utils import _compile_jinja_template

            try:
                source = self._tok.get_chat_template(None, [{}] if with_tools else None)
            except ValueError:
                self._compiled[with_tools] = None
            else:
                template = _compile_jinja_template(source)
                self._compiled[with_tools] = (template, dict(template.globals))
        return self._compiled[with_tools]

    def bounds(self, rendered: Rendered) -> tuple[int, int]:
        """``(lo, hi)`` with ``lo <= P <= hi`` (tokens), from byte lengths only; ``hi``
        includes the non-text parts' bound (:attr:`Rendered.media_tokens`), ``lo`` counts text
        only."""
        if rendered.ids_len is not None:
            return rendered.ids_len, rendered.ids_len
        size = self.text_bytes(rendered)
        extra = self._added if rendered.special else 0
        return -(-size // self.max_token_bytes), size + extra + 1 + rendered.media_tokens

    @staticmethod
    def text_bytes(rendered: Rendered) -> int:
        """UTF-8 bytes of the longest rendered text (0 for token-id prompts)."""
        texts = rendered.texts
        if len(texts) == 1:  # a chat's one prompt: no generator
            t = texts[0]
            return len(t) if t.isascii() else len(t.encode("utf-8"))
        return max((len(t) if t.isascii() else len(t.encode("utf-8")) for t in texts), default=0)

    def text_bytes_of_bound(self, hi: int, rendered: Rendered) -> int:
        """The text bytes :meth:`bounds` turned into ``hi`` (its inverse: no second pass over
        the text); ``rendered`` without non-text parts."""
        return hi - 1 - (self._added if rendered.special else 0)

    def exact(self, rendered: Rendered) -> int:
        """The exact prompt tokens P (the longest prompt of a batch)."""
        if rendered.ids_len is not None:
            return rendered.ids_len
        backend = getattr(self._tok, "_tokenizer", None)
        if backend is not None:
            # The Rust tokenizer directly: encode_batch_fast releases the GIL (encode does not) and
            # tracks no offsets (a quarter of the CPU at 8 KB, huggingface/tokenizers#1587); len(Encoding)
            # builds no list of ids (docs/performance.md, "Sizing a prompt without stalling the loop").
            return max(len(e) for e in backend.encode_batch_fast(list(rendered.texts),
                                                                 add_special_tokens=rendered.special))
        if rendered.special:
            return max(len(self._tok.encode(t)) for t in rendered.texts)
        return max(len(self._tok.encode(t, add_special_tokens=False)) for t in rendered.texts)

    def count(self, parsed: ParsedRequest) -> int:
        """Exact prompt tokens P of ``parsed`` (render + encode; CPU-bound, call off the loop)."""
        return self.exact(self.render(parsed))

    def count_chat(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                   template_kwargs: dict[str, Any] | None = None) -> int:
        """Exact tokens of ``messages`` rendered with the chat template and generation prompt."""
        text = self.render_chat(messages, tools=tools, template_kwargs=template_kwargs)
        return len(self._tok.encode(text, add_special_tokens=False))


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered prompt: the text(s) the engine encodes, or the length of token-id prompts.

    ``special``: the engine encodes with the tokenizer's special tokens added (completions).
    ``media_tokens``: upper bound of the non-text parts' tokens, on top of the text's
    (:attr:`ParsedRequest.media_tokens`); with any, no count of the prompt is exact.
    ``spliced``: the text was spliced from the template's pieces for the conversation's shape
    (:class:`router.request.template_shapes.ShapeRenders`), not rendered: its bounds are widened by
    :data:`router.request.template_shapes.SLACK_TOKENS` before an exact count is skipped.
    """

    texts: tuple[str, ...] = ()
    special: bool = False
    ids_len: int | None = None
    media_tokens: int = 0
    spliced: bool = False


def needs_exact(lo: int, hi: int, thresholds: Iterable[int]) -> bool:
    """True when some threshold ``t`` (a decision ``P <= t``) lies in ``[lo, hi)``.

    If none does, ``P <= t`` has the same truth value for every ``P`` in ``[lo, hi]``, so the
    decision made with ``hi`` equals the one made with the exact count.
    """
    return lo < hi and any(lo <= t < hi for t in thresholds)


def prompt_count(parsed: ParsedRequest) -> int:
    """Prompts in the request: the length of a completions batch (a list of strings or of
    token-id lists), else 1."""
    if parsed.kind == "completions" and prompt_kind(parsed.doc["prompt"]) in ("texts", "id_lists"):
        return len(parsed.doc["prompt"])
    return 1
