"""The language of what the chat reads: English or Chinese, chosen per run.

Every line the kit writes into the chat itself (failure explanations, the new-conversation notice,
notes about follow-ups and questions) comes in English and Chinese (:func:`t`). Which one a run
uses (:func:`choose`): the runner setting ``chat-language`` when the owner fixed one (``en_US`` or
``zh_Hans``), else the language the person wrote in (:func:`language_of`: mostly Chinese characters
→ Chinese), else — a message of only a file or an emoji — what the same conversation last wrote in,
else English. The choice is bound for the run like the redactor (:func:`bind`), so code deep in a
run asks :func:`current` instead of passing it down.

Config keys in the chat are named by the form's label in the run's language (:func:`label`), the
words the owner sees in LangBot's AI settings, not the YAML key.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

EN = "en"
ZH = "zh"
#: ``chat-language`` values -> language; anything else (``auto``, blank) follows the person
SETTINGS = {"en_US": EN, "zh_Hans": ZH}  # the form's options (the loader refuses any other)
_LOCALE = {EN: "en_US", ZH: "zh_Hans"}

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff01-\uff5e]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
# links, addresses and code say nothing of the writer's language; each match starts where a token
# does (a leading ``\S+`` tried at every position of a long unspaced run is quadratic)
_URLISH = re.compile(r"(?<!\S)\S+://\S+|(?<!\S)\S+@\S+|`[^`\n]{0,2000}`")
_SAMPLE = 4000  # characters enough to tell the language of a message of any length

_language: contextvars.ContextVar[str] = contextvars.ContextVar("runner_kit_chat_language", default=EN)
_fixed: contextvars.ContextVar[bool] = contextvars.ContextVar("runner_kit_chat_language_fixed", default=False)
_NO_LABELS: Mapping[str, Mapping[str, str]] = MappingProxyType({})
_labels: contextvars.ContextVar[Mapping[str, Mapping[str, str]]] = contextvars.ContextVar(
    "runner_kit_config_labels", default=_NO_LABELS)

# the language each conversation last wrote in, for a message with no words (bounded)
_LAST: OrderedDict[str, str] = OrderedDict()
_LAST_MAX = 10_000


def language_of(text: object) -> str | None:
    """``zh`` when Chinese characters carry the message (at least as many as its Latin words,
    links and code left out), ``en`` when Latin words do, None when it has neither."""
    body = _URLISH.sub(" ", str(text or "")[:_SAMPLE])
    han = len(_HAN.findall(body))
    words = len(_LATIN_WORD.findall(body))
    if han and han >= words:
        return ZH
    if words:
        return EN
    return None


def choose(setting: object, text: object, conversation: str | None = None) -> str:
    """The run's language (see the module doc); remembers it for ``conversation``."""
    fixed = SETTINGS.get(str(setting or "").strip())
    if fixed is not None:
        return fixed
    found = remember(conversation, text)
    if found is None and conversation is not None and conversation in _LAST:
        _LAST.move_to_end(conversation)  # still here: not the first forgotten
        return _LAST[conversation]
    return found or EN


def forget() -> None:
    """Forget the languages conversations last wrote in (tests)."""
    _LAST.clear()


def bind(language: str, labels: Mapping[str, Mapping[str, str]] | None = None, *,
         fixed: bool = False) -> tuple[Any, Any, Any]:
    """Use ``language`` (and the form's ``labels``: key -> locale -> text) for this run (``fixed``:
    the owner chose it, so a note to another member keeps it too); undo with :func:`unbind`."""
    return (_language.set(language if language in (EN, ZH) else EN), _labels.set(labels or _NO_LABELS),
            _fixed.set(fixed))


def unbind(tokens: tuple[Any, Any, Any]) -> None:
    """Undo :func:`bind` (a run generator closed from another context cannot: its context goes
    with it, so there is nothing to undo)."""
    for var, token in zip((_language, _labels, _fixed), tokens, strict=True):
        try:
            var.reset(token)  # type: ignore[attr-defined]
        except ValueError:
            pass


def remember(person: str | None, text: object) -> str | None:
    """The language ``text`` is in, remembered as ``person``'s (a follow-up's sender) when it has one."""
    found = language_of(text)
    if person and found is not None:
        _LAST[person] = found
        _LAST.move_to_end(person)
        while len(_LAST) > _LAST_MAX:
            _LAST.popitem(last=False)
    return found


def switch(language: str | None) -> None:
    """Speak ``language`` from here on in this run (another member's turn), unless the owner fixed one."""
    if language in (EN, ZH) and not _fixed.get():
        _language.set(language)


def of(person: str | None, text: object = "") -> str | None:
    """The language to address ``person`` in: that of ``text``, else the one they last wrote in."""
    return language_of(text) or (_LAST.get(person) if person else None)


class Said:
    """A chat line made where the run's language may not be known yet (an error raised inside an
    agent's reading task, which started in another member's run): rendered when shown."""

    __slots__ = ("en", "values", "zh")

    def __init__(self, en: str, zh: str, /, **values: Any):
        self.en, self.zh, self.values = en, zh, values

    def __str__(self) -> str:
        return t(self.en, self.zh, **self.values)


@contextlib.contextmanager
def to(text: object, person: str | None = None) -> Iterator[None]:
    """Within: notes addressed to whoever wrote ``text`` (another member's follow-up inside this
    run) in their language — that of ``text``, else the one ``person`` last wrote in — unless the
    owner fixed one or nothing says which."""
    found = None if _fixed.get() else of(person, text)
    if found is None:
        yield
        return
    token = _language.set(found)
    try:
        yield
    finally:
        _language.reset(token)


def current() -> str:
    return _language.get()


def t(en: str, zh: str, /, **values: Any) -> str:
    """``en`` or ``zh`` in the run's language, ``str.format``-ed with ``values`` when given."""
    text = zh if _language.get() == ZH else en
    return text.format(**values) if values else text


def own_or_builtin(value: object, en: str, zh: str, *former: str) -> str:
    """An owner's text setting, or — blank, or the English default an earlier version stored (the
    owner never changed it) — the built-in text in the run's language."""
    said = str(value or "").strip()
    if said and said != en and said not in former:
        return said
    return t(en, zh)


def label(key: str, language: str | None = None) -> str:
    """What the form calls config key ``key`` in ``language`` (the run's by default), quoted as the
    language quotes: “App API key” / 「应用 API 密钥」; the key itself when the form has no label."""
    language = language or _language.get()
    found = _labels.get().get(key) or {}
    text = found.get(_LOCALE[language]) or found.get("en_US") or key
    return f"「{text}」" if language == ZH else f"“{text}”"


def labels() -> Mapping[str, Mapping[str, str]]:
    return _labels.get()


def join(items: list[str]) -> str:
    """``a, b and c`` / ``a、b 和 c``."""
    if len(items) < 2:
        return "".join(items)
    if _language.get() == ZH:
        return "、".join(items[:-1]) + " 和 " + items[-1]
    return ", ".join(items[:-1]) + " and " + items[-1]
