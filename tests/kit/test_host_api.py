"""runner_kit.host_api: every ctx.api failure as the taxonomy code and message a bot owner reads,
for LangBot's model errors in English and in a Chinese-locale LangBot."""

from __future__ import annotations

import pytest
from langbot_plugin.api.entities.builtin.runner.errors import AgentAPIError, AgentAPIException
from langbot_plugin.api.proxies.runner.common import PermissionDeniedError

from runner_kit.host_api import host_error, is_context_overflow, no_token_counting, retryable


def action_error(text: str) -> AgentAPIException:
    return AgentAPIException(AgentAPIError(code="host.action_error", message=text))


EN = "RequesterError: Model request failed: {}"
ZH = "RequesterError: 模型请求失败: {}"

MODEL_CASES = [
    ("Invalid API key", "API 密钥无效", "upstream.auth", False),
    ("Invalid model or endpoint", "模型或接口地址无效", "upstream.not_found", False),
    ("Rate limit exceeded or insufficient balance", "请求过于频繁或余额不足", "upstream.rate_limited", True),
    ("Request timed out", "请求超时", "upstream.timeout", True),
    ("Connection failed", "连接失败", "upstream.unavailable", True),
    ("API error", "API 错误", "upstream.unavailable", True),
    ("Unknown error", "未知错误", "upstream.unavailable", True),
    ("Invalid request parameters", "请求参数错误", "upstream.bad_request", False),
    ("Context length exceeded", "上下文长度超限", "input.too_large", False),
]


@pytest.mark.parametrize(("en", "zh", "code", "again"), MODEL_CASES)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_model_errors_in_both_languages(en, zh, code, again, lang):
    text = EN.format(en) if lang == "en" else ZH.format(zh)
    err = host_error(action_error(text), what="the model 'm-main'")
    assert (err.code, err.retryable) == (code, again)
    assert err.message.startswith("the model 'm-main' failed: ")
    assert "RequesterError" not in err.message and (en if lang == "en" else zh) in err.message
    assert retryable(action_error(text)) is again


@pytest.mark.parametrize("text", [EN.format("Context length exceeded"), ZH.format("上下文长度超限")])
def test_context_overflow_is_recognised(text):
    assert is_context_overflow(action_error(text))
    assert not is_context_overflow(action_error(EN.format("Invalid API key")))
    assert not is_context_overflow(PermissionDeniedError("Context length exceeded"))


def test_transport_and_protocol_errors():
    late = AgentAPIException(AgentAPIError(code="deadline_exceeded", message="Agent run deadline has expired"))
    gone = AgentAPIException(AgentAPIError(code="runtime_error", message="connection closed"))
    odd = AgentAPIException(AgentAPIError(code="host.malformed_response", message="missing key message"))
    assert (host_error(late, what="x").code, host_error(late, what="x").retryable) == ("upstream.timeout", True)
    assert (host_error(gone, what="x").code, host_error(gone, what="x").retryable) == ("upstream.unavailable", True)
    assert (host_error(odd, what="x").code, host_error(odd, what="x").retryable) == ("upstream.protocol", False)


def test_permission_denied_is_a_config_problem():
    err = host_error(PermissionDeniedError("model 'm-x' is not authorized for this run"), what="the model 'm-x'")
    assert err.code == "config.invalid" and not err.retryable
    assert "m-x" in err.message and "settings" in err.message


def test_other_host_text_is_kept_readable_and_redacted():
    err = host_error(action_error("Tool weather failed: upstream said api_key=sk-abcdefghijklmnop"), what="weather")
    assert err.code == "upstream.error"
    assert "Tool weather failed" in err.message and "sk-abcdefghijklmnop" not in err.message


def test_no_token_counting_signal():
    assert no_token_counting(action_error("LLM provider does not support token counting"))
    assert not no_token_counting(action_error(EN.format("API error")))
