"""Logging with secrets redacted: every config secret seen in this process is scrubbed from the
records of the kit's, the plugins' and the HTTP libraries' loggers."""

from __future__ import annotations

import logging

from .errors import Redactor

LOG_REDACTOR = Redactor()

# a filter applies only to records logged on its own logger, not to those propagated from children
_REDACTED_LOGGERS = (
    "runner_kit",
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "langbot_plugin",
)


class RedactingFilter(logging.Filter):
    """Rewrites a record's message with secrets removed (args are folded into the message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not kill logging
            message = str(record.msg)
        clean = LOG_REDACTOR(message)
        if clean != message or record.args:
            record.msg = clean
            record.args = None
        return True


_FILTER = RedactingFilter()


def install(name: str) -> logging.Logger:
    """Attach the redacting filter to a logger (idempotent)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


for _name in _REDACTED_LOGGERS:
    install(_name)


def get_logger(name: str) -> logging.Logger:
    """A logger whose records are redacted."""
    return install(name)
