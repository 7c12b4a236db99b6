"""What the person in the chat reads when a run fails, and how the failure still reaches the ledger.

Observed on the real LangBot 4.11.2 host (probe plugin and DifyAgent through the pipeline websocket
chat, stream on and off, and the agent debug API; tests/e2e keeps the cells):

- A pipeline run that ends in ``run.failed`` shows only the host's generic line ("Agent runner
  execution failed." / "…temporarily unavailable…"). When streaming, the host sends it as an update
  of the runner's own message, replacing the text already shown; without streaming nothing the
  runner sent is delivered at all. No pipeline setting hides that line (an owner can only reword it).
- A pipeline run that ends in ``run.completed`` delivers its ``message.completed`` in both modes; the
  ledger row is then ``completed`` with the ``finish_reason`` as its status reason, the envelope
  usage is kept, and ``processor.log`` results are stored as run events (never shown in the chat).
- Agent debug (``delivery.automatic_reply`` false) answers a ``run.failed`` with HTTP 422
  ``{code, msg}``; its streaming variant, which the WebUI panel uses, shows the runner's message and
  then an error bubble with ``msg``. The ledger row is ``failed`` with code and ``retryable``.

So the driver ends a failed run with a complete message first — the text already streamed followed
by a short note on its own line saying it is incomplete and why (:func:`incomplete_note`), or, when
nothing was answered, one plain explanation of what went wrong and what to do (:func:`explanation`).
In pipelines it then logs ``run failed: code=<code> retryable=<true|false>: <message>`` as an error
``processor.log`` and ends with ``run.completed(finish_reason=<code>)`` carrying the partial usage:
the chat keeps the runner's words and the ledger keeps code, retryable and usage (its status column
says completed — the price of the host's behaviour). Elsewhere it ends with the one ``run.failed``.
``explain-failures: false`` (public bots) sends no explanation and always ends in ``run.failed``, so
the host's generic notice is all the chat shows.

The texts never carry secrets (messages are redacted before they get here, and once more here with
the run's redactor: a URL's ``user:password@`` shows as ``***@``), stack traces or a bare internal
code.
"""

from __future__ import annotations

import re

from . import texts
from .logs import redact_log

_LIMIT = 400
_FAILURE_LOG = re.compile(r"run failed: code=(\S+) retryable=(true|false): (.*)", re.DOTALL)


def failure_log(code: str, retryable: bool, message: str) -> str:
    """The ``processor.log`` line that records a failure a pipeline run ends without ``run.failed``."""
    return f"run failed: code={code} retryable={'true' if retryable else 'false'}: {redact_log(message)}"


def parse_failure_log(text: object) -> tuple[str, bool, str] | None:
    """``(code, retryable, message)`` from a :func:`failure_log` line, else None."""
    m = _FAILURE_LOG.fullmatch(str(text or ""))
    return (m.group(1), m.group(2) == "true", m.group(3)) if m else None


# what a detail loses before the chat shows it: trace and request ids (kept in the log)
# (an id has a digit: "Invalid request_id format" keeps its words; run on text with single spaces)
_ID_NAME = r"\b(?:trace[ _-]?id|request[ _-]?id|log[ _-]?id|x-request-id)\b ?[:=]? ?"
_ID = r"(?=[A-Za-z._:/-]{0,64}\d)[A-Za-z0-9._:/-]{6,128}"
_TRACE = re.compile(rf"(?i) ?[\[(]{_ID_NAME}{_ID} ?[)\]]|[,;]? ?{_ID_NAME}{_ID}")
# the kit's own phrases about a setting (runner_kit.config): (English for the chat, Chinese)
_PHRASES: dict[str, tuple[str, str]] = {
    "is required but not set": ("is not set", "未填写"),
    "is required but empty": ("is empty", "为空"),
    "is empty": ("is empty", "为空"),
    "must be one of: ": ("must be one of: ", "须为以下之一："),
    "must be true or false": ("must be true or false", "须为 true 或 false"),
    "must be a whole number": ("must be a whole number", "须为整数"),
    "must be a number, got an empty value": ("must be a number, but is empty", "须为数字，但为空"),
    "must be a number": ("must be a number", "须为数字"),
    "must be a finite number": ("must be a finite number", "须为有限的数字"),
    "must be 0 (no limit) or more": ("must be 0 (no limit) or more", "须为 0（不限）或更大"),
    "must be at least ": ("must be at least ", "不能小于 "),
    "must be a list": ("must be a list", "须为列表"),
    "must be a JSON object": ("must be a JSON object", "须为 JSON 对象"),
    "must be a string": ("must be a string", "须为文本"),
    "is not valid JSON": ("is not valid JSON", "不是有效的 JSON"),
}
_CONFIG_KEY = re.compile(r"config key '([A-Za-z0-9_.-]+)'\s*("
                         + "|".join(re.escape(p) for p in sorted(_PHRASES, key=len, reverse=True)) + ")?")


def _named(message: str, *, config: bool = True) -> str:
    """``message`` with every config key the form labels named by its label (in the run's
    language): ``config key 'api-key' is required but not set`` -> ``“App API key” is not set`` /
    ``「应用 API 密钥」未填写``; ``(check api-key: …)`` -> ``(check “App API key”: …)``."""
    labels = texts.labels()
    zh = texts.current() == texts.ZH

    def config_key(m: re.Match[str]) -> str:
        key, phrase = m.group(1), m.group(2)
        name = texts.label(key) if key in labels else f"'{key}'"
        if phrase is None:
            return name if zh else name + " "
        return name + (_PHRASES[phrase][1] if zh else " " + _PHRASES[phrase][0])

    # the kit's phrases about a setting only in a settings failure: elsewhere the words may be an
    # echo of what a member wrote, and must not become a claim about the bot's settings
    text = _CONFIG_KEY.sub(config_key, message) if config else message
    for key in sorted(labels, key=len, reverse=True):
        name = texts.label(key).replace("\\", "\\\\")  # a replacement template, not a function
        # quoted as a key is (a JSON field is named in double quotes, as JSON names it, and stays)
        text = re.sub(rf"(['`]){re.escape(key)}\1", name, text)
        if "-" in key:  # a hyphenated key is a key wherever it stands; a plain word may be just a word
            text = re.sub(rf"(?<![\w./-]){re.escape(key)}(?![\w/-])", name, text)
    return text


def _detail(message: str, code: str = "") -> str:
    """The failure's own message as the chat shows it: one line, redacted, without trace ids, with
    settings named by their labels (not for ``input.*``: the names there are the member's own, such
    as a file's), at most :data:`_LIMIT` characters. Every step is linear in the message's length,
    and each change of the text meets the redactor again (a label is shown text too)."""
    message = " ".join(redact_log(message).split())[: 4 * _LIMIT]
    message = redact_log(_TRACE.sub("", message))
    if not code.startswith("input."):
        message = redact_log(_named(message, config=code.startswith("config.")))
    message = message.strip().rstrip(".。")
    return message if len(message) <= _LIMIT else message[: _LIMIT - 1] + "…"


_FIX_SETTINGS = ("This bot's {p} settings need fixing: {d}. The bot owner can change them in the bot's AI settings.",
                 "此机器人的 {p} 设置需要修改：{d}。机器人所有者可以在机器人的 AI 设置中修改。")
_REFUSED = ("{p} refused the request: {d}.", "{p} 拒绝了这次请求：{d}。")
# code -> what the chat reads, (English, Chinese); {p}: the platform, {d}: the failure's own redacted
# message, with config keys named by their labels
_EXPLANATIONS: dict[str, tuple[str, str]] = {
    "config.missing": _FIX_SETTINGS,
    "config.invalid": _FIX_SETTINGS,
    "config.identity_unavailable": ("This bot cannot tell who is asking: {d}.", "此机器人无法确定是谁在提问：{d}。"),
    "input.invalid": ("Your message could not be sent to {p}: {d}.", "你的消息无法发送给 {p}：{d}。"),
    "input.too_large": ("Your message could not be sent to {p}, it is too large: {d}.",
                        "你的消息太大，无法发送给 {p}：{d}。"),
    "input.unreadable": ("Your message could not be sent to {p}, a part of it could not be read: {d}.",
                         "你的消息有部分内容无法读取，未能发送给 {p}：{d}。"),
    "input.refused": ("Your message could not be sent to {p}: {d}.", "你的消息无法发送给 {p}：{d}。"),
    "upstream.auth": ("{p} rejected the API key ({d}). The bot owner should check the key in this bot's AI settings.",
                      "{p} 拒绝了 API 密钥（{d}）。请机器人所有者在机器人的 AI 设置中检查密钥。"),
    "upstream.forbidden": ("{p} refused the request ({d}). The bot owner should check the key's permissions.",
                           "{p} 拒绝了这次请求（{d}）。请机器人所有者检查密钥的权限。"),
    "upstream.quota": ("{p} reports a used-up quota or balance ({d}). The bot owner needs to check the plan.",
                       "{p} 报告额度或余额已用完（{d}）。请机器人所有者检查套餐。"),
    "upstream.rate_limited": ("{p} is busy right now (rate limited). Please try again in a moment.",
                              "{p} 当前繁忙（请求频率受限），请稍后再试。"),
    "upstream.unavailable": ("{p} cannot be reached right now: {d}. Please try again in a moment.",
                             "暂时无法连接 {p}：{d}。请稍后再试。"),
    "upstream.bad_request": _REFUSED,
    "upstream.not_found": _REFUSED,
    "upstream.too_large": _REFUSED,
    "upstream.timeout": ("{p} did not answer in time: {d}. Please try again.", "{p} 未能及时回答：{d}。请再试一次。"),
    "upstream.tls": ("{p}'s secure connection could not be verified: {d}.", "无法验证 {p} 的安全连接：{d}。"),
    "upstream.protocol": ("{p} sent an answer this bot cannot read: {d}.", "{p} 返回了此机器人无法读取的内容：{d}。"),
    "upstream.error": ("{p} could not answer: {d}.", "{p} 无法回答：{d}。"),
    "upstream.empty_response": ("{p} finished without an answer: {d}. Please try again or rephrase.",
                                "{p} 结束了但没有给出回答：{d}。请再试一次或换个说法。"),
    "upstream.paused": ("{p} paused and waits for something this chat cannot give: {d}.",
                        "{p} 已暂停，正在等待此对话无法提供的操作：{d}。"),
    "process.not_found": ("{p} is not installed where this bot runs: {d}. The bot owner needs to install it or fix "
                          "its path in the bot's AI settings.",
                          "此机器人所在的主机上未安装 {p}：{d}。请机器人所有者安装它，或在机器人的 AI 设置中修正其路径。"),
    "process.crashed": ("{p} stopped unexpectedly: {d}. Please try again.", "{p} 意外停止：{d}。请再试一次。"),
    "process.exited": ("{p} ended before it answered: {d}.", "{p} 在回答前就结束了：{d}。"),
    "process.no_sandbox": ("{p} could not start safely here: {d}.", "{p} 无法在此安全启动：{d}。"),
    "runner.cancelled": ("The request was cancelled: {d}.", "请求已取消：{d}。"),
    "runner.internal": ("Something went wrong inside the {p} runner ({d}). Please report it to the bot owner.",
                        "{p} 运行器内部出错（{d}）。请告知机器人所有者。"),
}
_OTHER = ("{p} could not answer: {d}.", "{p} 无法回答：{d}。")


def explanation(platform: str, code: str, message: str) -> str:
    """One or two plain sentences in the run's language: what went wrong and what to do."""
    pair = _EXPLANATIONS.get(code) or _OTHER
    template = pair[1] if texts.current() == texts.ZH else pair[0]
    return template.format(p=platform, d=_detail(message, code))


def incomplete_note(platform: str, code: str, message: str, *, detailed: bool = True) -> str:
    """The line after a partial answer."""
    if not detailed:
        return texts.t("(This answer is incomplete.)", "（此回答不完整。）")
    return texts.t("(This answer is incomplete: {d}.)", "（此回答不完整：{d}。）", d=_detail(message, code))
