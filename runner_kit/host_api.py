"""LangBot's own APIs (``ctx.api``) as a plugin meets their failures: one mapping to the taxonomy.

The SDK raises :class:`AgentAPIException` for host and transport errors (``deadline_exceeded``,
``runtime_error``, ``host.malformed_response``, or ``host.action_error`` carrying the host's text)
and ``PermissionDeniedError`` before calling the host when the run was not granted the resource.
LangBot's model layer reports provider failures as text only, ``RequesterError: Model request
failed: <reason>``, translated in a Chinese-locale LangBot (``模型请求失败: <原因>``); the reason
phrases below are LangBot 4.11.2's litellm mappings in both languages.
"""

from __future__ import annotations

from langbot_plugin.api.entities.builtin.runner.errors import AgentAPIException
from langbot_plugin.api.proxies.runner.common import PermissionDeniedError

from .errors import RunnerError
from .logs import redact_log

# (taxonomy code, hint for the bot owner, phrases in LangBot's en_US and zh_Hans texts); first match wins
_MODEL_REASONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("input.too_large", "the conversation is longer than the model's context window",
     ("Context length exceeded", "上下文长度超限")),
    ("upstream.auth", "check the API key of this model's provider in LangBot",
     ("Invalid API key", "API 密钥无效")),
    ("upstream.not_found", "check the model name and the provider's base URL in LangBot",
     ("Invalid model or endpoint", "模型或接口地址无效")),
    ("upstream.rate_limited", "the provider is rate limiting or the account's balance is low",
     ("Rate limit exceeded or insufficient balance", "请求过于频繁或余额不足")),
    ("upstream.timeout", "the model provider did not answer in time",
     ("Request timed out", "请求超时")),
    ("upstream.unavailable", "LangBot could not reach the model provider",
     ("Connection failed", "连接失败")),
    ("upstream.bad_request", "the provider rejected the request's parameters",
     ("Invalid request parameters", "请求参数错误")),
    ("upstream.unavailable", "the model provider returned an error; it may be down or overloaded",
     ("API error", "API 错误", "Unknown error", "未知错误")),
)
_OVERFLOW = _MODEL_REASONS[0][2]
_NO_TOKEN_COUNTING = ("does not support token counting",)


def _text(exc: BaseException) -> str:
    if isinstance(exc, AgentAPIException):
        return str(exc.error.message or "")
    return str(exc)


def is_context_overflow(exc: BaseException) -> bool:
    """The provider refused the request because it exceeds the model's context window."""
    return isinstance(exc, AgentAPIException) and any(p in _text(exc) for p in _OVERFLOW)


def no_token_counting(exc: BaseException) -> bool:
    """The host cannot count tokens for this model (its provider has no token counter)."""
    return isinstance(exc, AgentAPIException) and any(p in _text(exc) for p in _NO_TOKEN_COUNTING)


def retryable(exc: BaseException) -> bool:
    """Whether trying again (or another model) may succeed."""
    return isinstance(exc, (AgentAPIException, PermissionDeniedError)) and host_error(exc, what="").retryable


def _reason(text: str) -> str:
    """The host's text without LangBot's exception-class prefix, bounded and redacted."""
    text = text.strip()
    for prefix in ("RequesterError:", "RequesterError"):
        if text.startswith(prefix):
            text = text[len(prefix):].strip()
    return redact_log(text)[:300]


def host_error(exc: BaseException, *, what: str) -> RunnerError:
    """``exc`` from a ``ctx.api`` call as a :class:`RunnerError` the bot owner can read: ``what``
    failed (e.g. ``the model m-main``), LangBot's reason and a hint; secrets redacted."""
    subject = what or "LangBot"
    if isinstance(exc, PermissionDeniedError):
        return RunnerError(
            "config.invalid",
            f"{subject} is not available to this runner: {_reason(str(exc))} (select it in the runner's "
            "settings so LangBot grants it)",
        )
    if not isinstance(exc, AgentAPIException):
        return RunnerError("runner.internal", f"{subject} failed: {_reason(repr(exc))}")
    code = exc.error.code
    text = _reason(_text(exc))
    if code == "deadline_exceeded":
        return RunnerError("upstream.timeout", f"{subject} did not answer within the run's time limit ({text})")
    if code == "runtime_error":
        return RunnerError("upstream.unavailable", f"the connection to LangBot was lost while calling {subject} ({text})")
    if code == "host.malformed_response":
        return RunnerError("upstream.protocol", f"LangBot returned an unexpected answer for {subject} ({text})")
    for taxonomy, hint, phrases in _MODEL_REASONS:
        if any(p in text for p in phrases):
            return RunnerError(taxonomy, f"{subject} failed: {text} ({hint})")
    return RunnerError("upstream.error", f"{subject} failed: {text}", retryable=bool(exc.error.retryable))
