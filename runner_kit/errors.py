"""One error taxonomy for every runner, and redaction of secrets from every message.

Every failure a runner reports is a :class:`RunnerError` carrying a stable ``code`` from the
table below and a ``retryable`` flag; the runner base turns it into exactly one ``run.failed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

# code -> retryable default
CODES: dict[str, bool] = {
    "config.invalid": False,
    "config.missing": False,
    "config.identity_unavailable": False,
    "input.invalid": False,
    "input.too_large": False,
    "input.unreadable": False,
    "input.refused": False,  # a link to a private or local address (runner_kit.netguard)
    "upstream.auth": False,
    "upstream.forbidden": False,
    "upstream.quota": False,
    "upstream.rate_limited": True,
    "upstream.unavailable": True,
    "upstream.bad_request": False,
    "upstream.not_found": False,
    "upstream.too_large": False,
    "upstream.timeout": True,
    "upstream.tls": False,
    "upstream.protocol": False,
    "upstream.error": False,
    "upstream.empty_response": False,
    "upstream.paused": False,
    "process.not_found": False,
    "process.crashed": True,
    "process.exited": False,
    "process.no_sandbox": False,
    "runner.cancelled": False,
    "runner.internal": False,
}


class RunnerError(Exception):
    """A failure with a stable taxonomy code; the message must already be safe to show."""

    def __init__(self, code: str, message: str, *, retryable: bool | None = None, status: int | None = None):
        if code not in CODES:
            raise ValueError(f"unknown runner error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = CODES[code] if retryable is None else retryable
        self.status = status

    def __repr__(self) -> str:
        return f"RunnerError({self.code!r}, {self.message!r}, retryable={self.retryable})"


class SessionMissing(Exception):
    """The upstream says the stored conversation/session no longer exists."""


def status_to_code(status: int) -> str:
    """Map an HTTP status to a taxonomy code (body-specific refinements happen in adapters)."""
    if status == 401:
        return "upstream.auth"
    if status == 403:
        return "upstream.forbidden"
    if status == 404:
        return "upstream.not_found"
    if status == 408:
        return "upstream.timeout"
    if status == 413:
        return "upstream.too_large"
    if status == 429:
        return "upstream.rate_limited"
    if status in (500, 502, 503, 504) or status >= 500:
        return "upstream.unavailable"
    if 400 <= status < 500:
        return "upstream.bad_request"
    return "upstream.protocol"


# line breaks, other control characters (a terminal's escapes) and direction marks
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def platform_error(
    platform: str, taxonomy: str, hint: str, status: int | None, code: str | None, message: str | None
) -> RunnerError:
    """One platform error as the owner reads it: ``<Platform> error HTTP <status> <code>: <message>
    (<hint>)``; a generic ``upstream.error`` with a 5xx status is retryable ``upstream.unavailable``."""
    code = (code or "").strip()
    # the platform's words on one line: they may quote a chat member (a file name, a link), and are
    # shown in the chat and logged; line breaks, other control characters and direction marks go.
    # Redacted first: "password: Sunshine<LF>retry" on one line reads as prose to the redaction
    message = " ".join(_CONTROL.sub(" ", redact(message or "")).split())
    parts = [f"{platform} error"]
    if status:
        parts.append(f"HTTP {status}")
    if code and code != str(status or ""):  # "HTTP 403 403" says nothing twice
        parts.append(code)
    text = " ".join(parts)
    detail = message or hint
    if detail:
        text += f": {detail[:300]}"
    if hint and message and hint not in message:
        text += f" ({hint})"
    if taxonomy == "upstream.error" and status is not None and status >= 500:
        taxonomy = "upstream.unavailable"
    return RunnerError(taxonomy, text, status=status)


def looks_html(body: bytes, content_type: str) -> bool:
    """A body that is a web page (a proxy's error page, a web UI), not the platform's API."""
    return body.lstrip()[:1] == b"<" or "html" in (content_type or "").lower()


def html_hint(status: int, platform: str, base_hint: str, what: str = "API") -> str:
    """What an HTML page with ``status`` most likely means, for the bot owner: a proxy's error page
    (the platform is down or slow), or a base URL that points at something else."""
    if status in (502, 503, 504):
        return f"a proxy in front of {platform} returned an HTML error page: {platform} may be down, restarting or too slow"
    if status in (404, 405):
        return f"the server returned an HTML page, not the {platform} {what} ({base_hint})"
    return "the server returned an HTML error page"


# --- redaction -------------------------------------------------------------------------------

# a value that is a word of a sentence ("InvalidApiKey: Invalid API-key provided", "Bearer
# authentication required") is not a secret: one run of letters followed by another word
_PROSE = r"(?![A-Za-z]{1,24}[ \t]+[A-Za-z(])"

# (pattern, keep group 1 as a visible prefix)
_PATTERNS: list[tuple[re.Pattern[str], bool]] = [
    # Authorization headers, with or without a scheme word
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer\s+|basic\s+|token\s+)?)[^\s,;\"']+"), True),
    (re.compile(rf"(?i)(bearer\s+){_PROSE}[A-Za-z0-9._~+/=-]{{6,}}"), True),
    # key=value / key: value style secrets in URLs, query strings, headers and logs
    (
        re.compile(
            r"(?i)((?:api[-_]?key|x-api-key|access[-_]?token|token|secret|password|passwd)[\"'`]?\s*[=:]\s*[\"'`]?)"
            + _PROSE + r"[^\s&,;\"'`]+"
        ),
        True,
    ),
    # well-known key shapes (Dify app keys, OpenAI/DashScope sk-, Coze pat_)
    (re.compile(r"\b(?:app-|sk-|pat_|sk_live_|sk_test_)[A-Za-z0-9_-]{8,}"), False),
    # a URL's userinfo (``scheme://user:pass@host``, or a lone token as the user): scheme://***@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,31}://)[^/?#\s\"'<>\\]*(?=@)"), True),
    # credentials in a query string (signed links, ``?key=``): ?key=***
    (re.compile(r"(?i)([?&;](?:key|api[-_]?key|token|access[-_]?token|sign|signature|sig|password|secret)=)[^&#\s\"'<>]+"),
     True),
]

REDACTED = "***"


class Redactor:
    """Removes known secret values and secret-looking patterns from text."""

    def __init__(self, secrets: Iterable[str] = ()):
        self._secrets: list[str] = []
        for s in secrets:
            self.add(s)

    def add(self, secret: object) -> None:
        """Remember one secret value (short values are ignored to avoid mangling text)."""
        if isinstance(secret, str) and len(secret) >= 4 and secret not in self._secrets:
            self._secrets.append(secret)
            self._secrets.sort(key=len, reverse=True)

    def __call__(self, text: object) -> str:
        out = str(text)
        for s in self._secrets:
            if s in out:
                out = out.replace(s, REDACTED)
        for pat, keep in _PATTERNS:
            out = pat.sub(_keep_prefix if keep else REDACTED, out)
        return out


def _keep_prefix(m: re.Match[str]) -> str:
    return m.group(1) + REDACTED


redact = Redactor()


# --- which config values are secrets ---------------------------------------------------------

_URL_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,31}://([^/?#\s\"'<>\\]*)@")
_SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "passphrase", "secret", "token", "apikey", "authorization", "credential",
    "credentials", "cookie", "signature",
})
# ``<word>-key`` names a secret for these words (``api-key``, ``access_key``), not for others (``env-key``)
_KEY_WORDS = frozenset({"api", "access", "private", "secret", "auth", "signing", "encryption", "client", "app", "master"})
_ENV_LINE = re.compile(r"(?m)^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*=[ \t]*(.*?)[ \t]*$")
_SCHEME_WORDS = ("bearer ", "basic ", "token ", "bot ")


def secret_name(name: object) -> bool:
    """A setting, header, variable or JSON key whose value is a credential (``api-key``,
    ``OPENAI_API_KEY``, ``jwt-secret``, ``Authorization``, ``auth_token``, ``password``); not
    ``env-key`` (which names a variable) or ``max_tokens``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", str(name or ""))
    words = [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]
    if words == ["key"]:
        return True
    return any(w in _SECRET_WORDS or (w == "key" and i and words[i - 1] in _KEY_WORDS) for i, w in enumerate(words))


def url_userinfo(text: object) -> list[str]:
    """The credentials in every URL in ``text``: its whole ``user:pass`` (or lone user, often a
    token), the password alone, and their percent-decoded forms."""
    out: list[str] = []
    for m in _URL_USERINFO.finditer(str(text or "")):
        info = m.group(1)
        password = info.partition(":")[2]
        for value in (info, password, unquote(info), unquote(password)):
            if value and value not in out:
                out.append(value)
    return out


def config_secrets(value: object, name: str | None = None) -> list[str]:
    """The secret values inside one config value: the value of every secret-named key (at any
    depth of JSON objects, ``{"name": …, "value": …}`` pairs and ``NAME=value`` lines) and the
    credentials of every URL."""
    out: list[str] = []
    _walk(value, name, out, 0)
    return out


def _walk(value: object, name: str | None, out: list[str], depth: int) -> None:
    if depth > 16:
        return
    if isinstance(value, str):
        if name is not None and secret_name(name):
            _credential(value, out)
        out.extend(url_userinfo(value))
        text = value.strip()
        if text[:1] in ("{", "[") and depth < 16:
            try:
                _walk(json.loads(text), name, out, depth + 1)
            except ValueError:
                pass
        if "=" in text:
            for m in _ENV_LINE.finditer(value):
                if secret_name(m.group(1)):
                    _credential(m.group(2), out)
    elif isinstance(value, Mapping):
        pair_name = value.get("name", value.get("key"))
        if isinstance(pair_name, str) and secret_name(pair_name) and isinstance(value.get("value"), str):
            _credential(value["value"], out)
        for key, item in value.items():
            _walk(item, str(key), out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _walk(item, name, out, depth + 1)


def _credential(value: str, out: list[str]) -> None:
    """One credential value (quotes and an ``Authorization`` scheme word are also taken off)."""
    value = value.strip().strip("\"'").strip()
    low = value.lower()
    if not value or low in ("true", "false", "none", "null") or value.replace(".", "").isdigit():
        return
    out.append(value)
    for word in _SCHEME_WORDS:
        if low.startswith(word) and value[len(word):].strip():
            out.append(value[len(word):].strip())


def redact_value(value: Any, redact: Redactor) -> Any:
    """``value`` (a tool call's parameters or result: str, dict, list, …) with every string in it
    passed through ``redact``; dict keys too."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_value(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, redact) for v in value]
    return value
