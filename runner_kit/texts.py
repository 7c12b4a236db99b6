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
SETTINGS = {"en_US": EN, "en": EN, "zh_Hans": ZH, "zh": ZH, "zh_CN": ZH}
_LOCALE = {EN: "en_US", ZH: "zh_Hans"}

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff01-\uff5e]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
_URLISH = re.compile(r"\S+://\S+|\S+@\S+|`[^`]*`")

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
    body = _URLISH.sub(" ", str(text or ""))
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
    found = language_of(text)
    if conversation:
        if found is None:
            return _LAST.get(conversation, EN)
        _LAST[conversation] = found
        _LAST.move_to_end(conversation)
        while len(_LAST) > _LAST_MAX:
            _LAST.popitem(last=False)
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
    _language.reset(tokens[0])
    _labels.reset(tokens[1])
    _fixed.reset(tokens[2])


@contextlib.contextmanager
def to(text: object) -> Iterator[None]:
    """Within: notes addressed to whoever wrote ``text`` (another member's follow-up inside this
    run) in their language, unless the owner fixed one or ``text`` says nothing."""
    found = None if _fixed.get() else language_of(text)
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
