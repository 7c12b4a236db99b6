"""Logging with secrets redacted: the running run's config secrets (and secret-looking patterns
everywhere) are scrubbed from the records of the kit's, the plugins' and the HTTP libraries' loggers.

The secrets live in a context variable bound by the driver for the run's task, not in module state:
one plugin process serves many bots, and nothing of one bot may stay behind for the next.
"""

from __future__ import annotations

import contextvars
import logging

from .errors import Redactor

_PATTERNS_ONLY = Redactor()
_RUN_REDACTOR: contextvars.ContextVar[Redactor] = contextvars.ContextVar("runner_kit_redactor", default=_PATTERNS_ONLY)


def bind_redactor(redactor: Redactor) -> contextvars.Token[Redactor]:
    """Redact ``redactor``'s secrets from every record logged in this context (the current run)."""
    return _RUN_REDACTOR.set(redactor)


def unbind_redactor(token: contextvars.Token[Redactor]) -> None:
    try:
        _RUN_REDACTOR.reset(token)
    except ValueError:  # reset from another context (a generator closed elsewhere): nothing to undo
        pass


def redact_log(text: object) -> str:
    """Redact ``text`` with the current run's secrets and the global secret patterns."""
    return _RUN_REDACTOR.get()(text)


def remember_secret(*values: object) -> None:
    """Add ``values`` to the current run's redactor (nothing outside a run: the patterns-only
    redactor is shared by every bot of the process and keeps no values)."""
    redactor = _RUN_REDACTOR.get()
    if redactor is not _PATTERNS_ONLY:
        for value in values:
            redactor.add(value)


# A filter applies only to records logged on its own logger, not to those propagated from children,
# so every logger httpx and httpcore log on is named (httpx logs each request's URL at INFO:
# "HTTP Request: POST http://user:pass@host/…"; the patterns strip userinfo and key/token/sign query
# parameters from it, and the run's secrets with them).
_REDACTED_LOGGERS = (
    "runner_kit",
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "langbot_plugin",
)
_HTTP_PREFIXES = ("httpx.", "httpcore.")
_FORMATTER = logging.Formatter()


class RedactingFilter(logging.Filter):
    """Rewrites a record's message with secrets removed (args are folded into the message, and a
    traceback attached to the record is formatted once, redacted)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not kill logging
            message = str(record.msg)
        clean = redact_log(message)
        if clean != message or record.args:
            record.msg = clean
            record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_log(_FORMATTER.formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact_log(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_log(record.stack_info)
        return True


_FILTER = RedactingFilter()


def install(name: str) -> logging.Logger:
    """Attach the redacting filter to a logger (idempotent)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def install_http_filters() -> None:
    """The filter on httpx's and httpcore's loggers, including any child logger they created."""
    for name in _REDACTED_LOGGERS:
        install(name)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_HTTP_PREFIXES):
            install(name)


install_http_filters()


def get_logger(name: str) -> logging.Logger:
    """A logger whose records are redacted."""
    return install(name)
