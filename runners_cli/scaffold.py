"""``runners new``: start a plugin in the same shape as every other one (style.md's module layout)."""

from __future__ import annotations

import re
from pathlib import Path

from .plugins import ROOT

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
    en_US: {platform}
    zh_Hans: {platform}
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
      default: "(The previous conversation could not be continued, so this reply starts a new one.)"
      advanced: true
      show_if: {{field: advanced-settings, operator: eq, value: true}}
      label: {{en_US: New conversation notice, zh_Hans: 新会话提示语}}
      description: {{en_US: The line shown then., zh_Hans: 此时显示的提示语。}}
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
# README.md otherwise. Both name every config key; tables stay at most three short columns (the
# page is a narrow pane), details go in the bullets below them.
_README = """\
# {name} — {platform} as a LangBot agent

中文说明：[readme/README_zh_Hans.md](readme/README_zh_Hans.md) (LangBot shows it when its interface
is in Chinese).

Runner id: `plugin:langbot-team/{name}/default` · version 0.3.0

## Configuration

| key | default |
|---|---|
| `base-url` | required |
| `api-key` | required |
| `timeout` | `120` |
| `remove-think` | `false` |
| `user-id-source` | `actor` |
| `advanced-settings` | `false` |
| `idle-timeout` | `0` (off) |
| `explain-failures` | `true` |
| `session-reset-notice` | `true` |
| `session-reset-text` | a short line |

- `base-url` (string): the {platform} API address.
- `api-key` (secret): the {platform} API key.
- `timeout` (seconds): the longest a whole answer may take; LangBot also stops the run at this limit.
  0 means no limit.
- `remove-think` (boolean): drop reasoning from the reply.
- `user-id-source`: what {platform} sees as the end user. `actor` and `hashed` (an opaque `lb_…` id)
  give each person in a group their own conversation; `conversation` shares one per LangBot chat.
- `advanced-settings` (boolean): apply the advanced settings below; when off they keep their defaults.
- `idle-timeout` (seconds, advanced): end the run when {platform} sends nothing at all for this long.
- `explain-failures` (boolean, advanced): explain a failure in the chat instead of LangBot's generic
  notice; an answer cut off midway keeps its text with a note.
- `session-reset-notice` / `session-reset-text` (advanced): announce in one line that a new upstream
  conversation was started because the stored one is gone.

## Limits
"""

_README_ZH = """\
# {name} — 把 {platform} 作为 LangBot 智能体

English: [README.md](../README.md)（LangBot 界面为英文时显示该页）。

运行器 ID：`plugin:langbot-team/{name}/default` · 版本 0.3.0

## 配置

| 配置项 | 默认值 |
|---|---|
| `base-url` | 必填 |
| `api-key` | 必填 |
| `timeout` | `120` |
| `remove-think` | `false` |
| `user-id-source` | `actor` |
| `advanced-settings` | `false` |
| `idle-timeout` | `0`（关闭） |
| `explain-failures` | `true` |
| `session-reset-notice` | `true` |
| `session-reset-text` | 一句提示 |

- `base-url`（字符串）：{platform} API 地址。
- `api-key`（密钥）：{platform} API 密钥。
- `timeout`（秒）：一次回答的最长时间；LangBot 也会在此时限终止运行。0 表示不限时。
- `remove-think`（布尔）：从回复中去除思考内容。
- `user-id-source`：{platform} 看到的终端用户。`actor` 与 `hashed`（不透明的 `lb_…` 标识）让群里每人各有一个会话；
  `conversation` 则每个 LangBot 会话共用一个。
- `advanced-settings`（布尔）：应用下面的高级设置；关闭时使用默认值。
- `idle-timeout`（秒，高级）：{platform} 在这段时间内没有发送任何内容时结束运行。
- `explain-failures`（布尔，高级）：在聊天中说明失败原因，而不是 LangBot 的通用提示；中途中断的回答保留已输出的文字并附说明。
- `session-reset-notice` / `session-reset-text`（高级）：保存的平台会话已不存在、开始新会话时用一行提示。

## 限制
"""

_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64" width="64" height="64">'
    '<rect width="64" height="64" rx="14" fill="#444"/></svg>\n'
)

REQUIREMENTS = "langbot-plugin>=0.7.16,<0.8\nhttpx>=0.27\npydantic>=2.7\npyyaml>=6\nsniffio>=1.3\n"


def scaffold(dirname: str, name: str, platform: str, root: Path = ROOT) -> Path:
    """Create ``root/dirname`` as a new plugin named ``name`` (e.g. coze-agent, CozeAgent)."""
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", dirname):
        raise ValueError("the directory name is lower-case words joined by '-', e.g. coze-agent")
    if not re.fullmatch(r"[A-Z][A-Za-z0-9]*", name):
        raise ValueError("the plugin name is CamelCase, e.g. CozeAgent")
    target = root / dirname
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    pkg = dirname.replace("-", "_")
    cls = name[:-5] if name.endswith("Agent") and len(name) > 5 else name
    fields = {"name": name, "platform": platform, "pkg": pkg, "cls": cls, "dirname": dirname,
              "key": pkg.split("_")[0]}
    files = {
        "manifest.yaml": _MANIFEST,
        "main.py": _MAIN,
        "components/__init__.py": "",
        "components/runner/__init__.py": "",
        "components/runner/default.yaml": _RUNNER_YAML,
        "components/runner/default.py": _RUNNER_PY,
        f"{pkg}/__init__.py": f'"""{platform} adapter for the {name} LangBot runner."""\n',
        f"{pkg}/const.py": _CONST,
        f"{pkg}/adapter.py": _ADAPTER,
        "requirements.txt": REQUIREMENTS,
        "README.md": _README,
        "readme/README_zh_Hans.md": _README_ZH,
        "assets/icon.svg": _ICON,
    }
    for rel, template in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields) if template else "", encoding="utf-8")
    return target
