"""Repository check (in the spirit of Home Assistant's hassfest): every plugin is packageable,
documented, migration-compatible and self-contained; shared concerns stay in the shared kit."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

from runners_cli.build import (
    LABEL_MAX_COLUMNS,
    PLACEHOLDER_ICON,
    README_FILES,
    README_MAX_COLUMNS,
    config_item_problems,
    display_columns,
    duplicate_icons,
    form_fields,
    listing_problems,
    markdown_tables,
    names_label,
    never_shown,
    parse_requirements,
    readme_problems,
    requirement_problems,
    validate_plugin,
)
from runners_cli.plugins import ROOT, PluginInfo, discover

PLUGINS = discover()
IDS = [p.dirname for p in PLUGINS]

# --- what LangBot 4.11.2's legacy-pipeline migration emits (host-contract.md §5.2) -------------

PLAIN_STR = frozenset({"string", "text", "secret", "password"})
BOOL = frozenset({"boolean", "bool"})
NUMBER = frozenset({"float", "number"})
INT = frozenset({"integer", "int", "float", "number"})
DICT = frozenset({"json", "object"})
LIST_PREFIXES = ("array", "multi-select", "knowledge-base-", "prompt-editor")


@dataclass(frozen=True)
class Key:
    """One migrated key: the declared types that accept its value, and select options it needs."""

    kind: str  # str | free | select | bool | number | int | list | dict
    options: frozenset[str] = frozenset()

    def problem(self, item: dict) -> str | None:
        t = str(item.get("type"))
        custom = bool(item.get("allow_custom"))
        if self.kind == "str":
            return None if t in PLAIN_STR else f"type {t!r} does not take the migrated string"
        if self.kind == "free":  # any legacy string must pass
            ok = t in PLAIN_STR or (t == "select" and custom)
            return None if ok else f"type {t!r} rejects free-form legacy strings (use string or select+allow_custom)"
        if self.kind == "select":
            if t != "select":
                return f"type {t!r}, expected select"
            if custom:
                return None
            declared = {str(o.get("name", o.get("value"))) if isinstance(o, dict) else str(o)
                        for o in item.get("options") or []}
            missing = self.options - declared
            return f"select options lack {sorted(missing)}" if missing else None
        if self.kind == "bool":
            return None if t in BOOL else f"type {t!r}, expected boolean"
        if self.kind == "number":
            return None if t in NUMBER else f"type {t!r}, expected float or number (int and float must both pass)"
        if self.kind == "int":
            return None if t in INT else f"type {t!r}, expected integer/float/number"
        if self.kind == "list":
            return None if t.startswith(LIST_PREFIXES) else f"type {t!r}, expected a list type"
        if self.kind == "dict":
            return None if t in DICT else f"type {t!r}, expected json/object"
        if self.kind == "model":  # {primary, fallbacks, reasoning} (or an id)
            return None if t == "model-fallback-selector" else f"type {t!r}, expected model-fallback-selector"
        if self.kind == "model-id":  # a model uuid string
            ok = t in PLAIN_STR or t in ("select", "llm-model-selector", "embedding-model-selector",
                                         "rerank-model-selector")
            return None if ok else f"type {t!r} does not take the migrated model id"
        raise AssertionError(self.kind)


S, FREE, B, N, INTEGER, L, D = Key("str"), Key("free"), Key("bool"), Key("number"), Key("int"), Key("list"), Key("dict")
MODEL, MODEL_ID = Key("model"), Key("model-id")


def sel(*options: str) -> Key:
    return Key("select", frozenset(options))


# One row per plugin (an empty row: LangBot's migration has no target for it). Later plugins add rows.
MIGRATION_KEYS: dict[str, dict[str, Key]] = {
    "DifyAgent": {
        "base-url": S, "api-key": S, "app-type": sel("chat", "agent", "workflow", "chatflow"), "base-prompt": S,
        "timeout": N, "advanced-settings": B, "langbot-assets-enabled": B, "remove-think": B,
        "user-id-source": sel("legacy-session"),
    },
    "CozeAgent": {
        "api-key": S, "bot-id": S, "api-base": S, "timeout": N, "auto-save-history": B, "advanced-settings": B,
        "langbot-assets-enabled": B, "remove-think": B, "user-id-source": sel("legacy-session"),
    },
    "DashScopeAgent": {
        "app-type": sel("agent", "workflow"), "api-key": S, "app-id": S, "references_quote": S, "timeout": N,
        "advanced-settings": B, "langbot-assets-enabled": B, "remove-think": B,
    },
    "N8nAgent": {
        "webhook-url": S, "auth-type": sel("none", "basic", "jwt", "header"), "basic-username": S,
        "basic-password": S, "jwt-secret": S, "jwt-algorithm": FREE, "header-name": S, "header-value": S,
        "timeout": N, "output-key": S, "response-handling": sel("reply", "ignore"), "basic-encoding": FREE,
        "advanced-settings": B, "langbot-assets-enabled": B, "user-id-source": sel("legacy-session"),
    },
    "LangflowAgent": {
        "base-url": S, "api-key": S, "flow-id": S, "input-type": FREE, "output-type": FREE, "tweaks": D,
        "advanced-settings": B, "langbot-assets-enabled": B,
    },
    "DeerFlowAgent": {
        "api-base": S, "api-key": S, "auth-header": S, "assistant-id": FREE, "model-name": FREE,
        "thinking-enabled": B, "plan-mode": B, "subagent-enabled": B, "max-concurrent-subagents": INTEGER,
        "timeout": N, "recursion-limit": INTEGER,
    },
    "TboxAgent": {
        "api-key": S, "app-id": S, "timeout": N, "remove-think": B, "user-id-source": sel("legacy-bot"),
    },
    "WeKnoraAgent": {
        "base-url": S, "api-key": S, "app-type": sel("chat", "agent"), "agent-id": FREE,
        "knowledge-base-ids": L, "web-search-enabled": B, "timeout": N, "base-prompt": S, "advanced-settings": B,
    },
    "LocalAgent": {
        "model": MODEL, "prompt": L, "box-session-id-template": S, "rerank-model": MODEL_ID,
        "rerank-top-k": INTEGER, "retrieval-top-k": INTEGER, "timeout": N, "advanced-settings": B,
        "date-grounding": B, "max-tool-iterations": INTEGER, "tool-execution-mode": sel("serial", "parallel"),
        "max-tool-result-chars": INTEGER, "context-history-fetch-limit": INTEGER, "context-window-tokens": INTEGER,
        "context-reserve-tokens": INTEGER, "context-keep-recent-tokens": INTEGER, "context-summary-tokens": INTEGER,
        "remove-think": B,
    },
    "ACPAgent": {},
    "ACPRunner": {},  # LangBot 4.11.2's migration has no legacy ACP runner (host-contract.md §5.2)
    "ClaudeCodeAgent": {},
    "CodexAgent": {},
    "LicosAgent": {},
}

# host fields the migration adds to every target; they need no schema entry, but a plugin that
# declares one is checked by its declared type (LangBot's _verify_runtime looks the schema up first)
HOST_FIELD_KEYS: dict[str, Key] = {"enable-all-tools": B, "tools": L, "knowledge-bases": L, "mcp-resources": L,
                                   "mcp-resource-agent-read-enabled": B}
HOST_FIELDS = set(HOST_FIELD_KEYS)

# import name -> distribution name where they differ
IMPORT_TO_DIST = {"yaml": "pyyaml", "langbot_plugin": "langbot-plugin", "acp": "agent-client-protocol"}

# code that may own HTTP clients and child processes; everything else goes through the kit
SHARED_DIRS = {"runner_kit", "tests", "runners_cli", "bench"}
SKIP_DIRS = {".venv", ".stage", "dist", ".git", "__pycache__", "node_modules"}


def _items(info: PluginInfo) -> dict[str, dict]:
    return {i["name"]: i for i in info.config_items if isinstance(i, dict) and "name" in i}


def _py_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*.py") if not (set(p.relative_to(directory).parts) & SKIP_DIRS)]


def _top_level_imports(files: list[Path]) -> dict[str, str]:
    """Absolute imports' top-level names -> one file that imports it."""
    found: dict[str, str] = {}
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(f.relative_to(ROOT)))
    return found


# --- per plugin ---------------------------------------------------------------------------------


def test_there_are_plugins() -> None:
    assert PLUGINS, "no plugin directories found"


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_manifest_valid(info: PluginInfo) -> None:
    problems = validate_plugin(info.directory).problems
    assert problems == [], f"{info.dirname}:\n" + "\n".join(problems)
    assert info.author == "langbot-team"
    assert info.runner_id == f"plugin:langbot-team/{info.name}/default"


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_config_items_are_bilingual(info: PluginInfo) -> None:
    problems = config_item_problems(info.config_items, descriptions=True)
    assert problems == [], f"{info.dirname}:\n" + "\n".join(problems)


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_icon_exists(info: PluginInfo) -> None:
    assert (info.directory / "assets" / "icon.svg").is_file()
    assert (info.directory / "assets" / "icon.svg").read_text(encoding="utf-8").lstrip().startswith(("<svg", "<?xml"))


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_requirements_are_plain_and_complete(info: PluginInfo) -> None:
    req_file = info.directory / "requirements.txt"
    assert requirement_problems(req_file) == []
    declared = {canonicalize_name(r.name) for r in parse_requirements(req_file)}
    local = {p.stem for p in info.directory.iterdir() if p.suffix == ".py"} | {
        p.name for p in info.directory.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    }
    ignored = set(sys.stdlib_module_names) | {"runner_kit"} | local
    # runner_kit is vendored into every package, so its imports are the plugin's imports too
    imports = _top_level_imports(_py_files(info.directory) + _py_files(ROOT / "runner_kit"))
    missing = {
        name: where for name, where in imports.items()
        if name not in ignored and canonicalize_name(IMPORT_TO_DIST.get(name, name)) not in declared
    }
    assert not missing, f"{info.dirname}/requirements.txt lacks: " + ", ".join(
        f"{IMPORT_TO_DIST.get(n, n)} (imported in {w})" for n, w in sorted(missing.items())
    )


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_migration_keys_declared(info: PluginInfo) -> None:
    assert info.name in MIGRATION_KEYS, (
        f"add a MIGRATION_KEYS row for {info.name} (an empty one if LangBot's migration has no target for it)"
    )
    expected = MIGRATION_KEYS[info.name]
    items = _items(info)
    problems = []
    for key, spec in expected.items():
        if key not in items:
            problems.append(f"{key}: not declared")
        elif (p := spec.problem(items[key])) is not None:
            problems.append(f"{key}: {p}")
    for key, spec in HOST_FIELD_KEYS.items():
        if expected and key in items and (p := spec.problem(items[key])) is not None:
            problems.append(f"{key} (a host field the migration always writes): {p}")
    if expected:  # a migrated config must satisfy every required field without a default
        for name, item in items.items():
            if item.get("required") and item.get("default") is None and name not in set(expected) | HOST_FIELDS:
                problems.append(f"{name}: required without a default, but the migration never sets it")
    assert problems == [], f"{info.dirname}:\n" + "\n".join(problems)


@pytest.mark.parametrize("readme", README_FILES)
@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_readme_names_every_field_by_its_label(info: PluginInfo, readme: str) -> None:
    # LangBot's plugin page serves readme/README_<language>.md to a non-English UI, README.md otherwise;
    # an owner reading it finds a setting on the form by the label the form shows in that language
    # (issue 34 items 6 and 9: the pages named keys, which the form does not show)
    path = info.directory / readme
    assert path.is_file(), f"{info.dirname}/{readme} is missing"
    locale = "zh_Hans" if readme.startswith("readme/") else "en_US"
    text = path.read_text(encoding="utf-8")
    missing = [f"**{i['label'][locale]}** ({i['name']})" for i in form_fields(info.config_items)
               if not names_label(text, i["label"][locale])]
    assert missing == [], f"{info.dirname}/{readme} does not name: {', '.join(missing)}"


@pytest.mark.parametrize("readme", README_FILES)
@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_readme_tables_are_narrow(info: PluginInfo, readme: str) -> None:
    # the plugin page is a narrow pane: at 1440 px a fourth column is already cut off
    path = info.directory / readme
    if not path.is_file():
        pytest.skip(f"{readme} is missing (reported by test_readme_names_every_field_by_its_label)")
    wide = [(line, cols) for line, cols in markdown_tables(path.read_text(encoding="utf-8"))
            if cols > README_MAX_COLUMNS]
    assert wide == [], f"{info.dirname}/{readme}: tables wider than {README_MAX_COLUMNS} columns at " + ", ".join(
        f"line {line} ({cols} columns)" for line, cols in wide
    )


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_readme_problems_are_none(info: PluginInfo) -> None:
    # includes: the Chinese page is the whole page translated (same headings), not a summary
    problems = readme_problems(info.directory, info.config_items)
    assert problems == [], f"{info.dirname}:\n" + "\n".join(problems)


# two fields of a form, as a runner YAML declares them, and a third that no form shows
_ITEMS = [
    {"name": "idle-timeout", "type": "float", "label": {"en_US": "Idle timeout (seconds)", "zh_Hans": "空闲超时（秒）"}},
    {"name": "timeout", "type": "float", "label": {"en_US": "Timeout (seconds)", "zh_Hans": "超时时间（秒）"}},
    {"name": "advanced-settings", "type": "boolean", "label": {"en_US": "Advanced settings", "zh_Hans": "高级设置"}},
    {"name": "box-session-id-template", "type": "string",
     "show_if": {"field": "advanced-settings", "operator": "eq", "value": "never"},
     "label": {"en_US": "Box session id template (unused)", "zh_Hans": "Box 会话 ID 模板（未使用）"}},
]


def test_readme_checks_catch_the_problems(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "# X\n\n## Configuration\n\n| key | type | default | meaning |\n|---|---|---|---|\n"
        "| **Idle timeout (seconds)** (`idle-timeout`) | float | `30` | x |\n\n```\n| a | b | c | d |\n|---|---|---|---|\n```\n\n"
        "a | b\n--|--\n\n**Advanced settings**: the `timeout` key.\n",
        encoding="utf-8",
    )
    assert markdown_tables((tmp_path / "README.md").read_text(encoding="utf-8")) == [(5, 4), (14, 2)]
    problems = readme_problems(tmp_path, _ITEMS)
    # issue 34 items 6 and 9: a page that names the key `timeout` but not its label is refused; a
    # label inside a longer one does not count; the field no form shows needs no name
    assert [p for p in problems if "does not name" in p] == [
        "README.md does not name these settings by the label the form shows beside them (en_US), in bold: "
        "**Timeout (seconds)** (`timeout`)"], problems
    assert any("README.md:5: a table has 4 columns" in p for p in problems), problems
    assert any("readme/README_zh_Hans.md is missing" in p for p in problems), problems
    (tmp_path / "readme").mkdir()
    # the Chinese page names the fields by their English labels: refused, the form there is in Chinese
    (tmp_path / "readme" / "README_zh_Hans.md").write_text(
        "# X\n\n**Idle timeout (seconds)** **Timeout (seconds)** **Advanced settings**\n", encoding="utf-8")
    problems = readme_problems(tmp_path, _ITEMS)
    assert any("has no Chinese text" in p for p in problems), problems
    assert any("translate the whole page" in p for p in problems), problems
    assert [p for p in problems if "README_zh_Hans.md does not name" in p] == [
        "readme/README_zh_Hans.md does not name these settings by the label the form shows beside them (zh_Hans), "
        "in bold: **空闲超时（秒）** (`idle-timeout`), **超时时间（秒）** (`timeout`), **高级设置** (`advanced-settings`)"]
    en_table = ("## What it does when…\n\n| when | what the plugin does |\n|---|---|\n"
                "| **Stop** (a cancel) | The platform's stop API is called. |\n"
                "| **Reset** (a reset) | The old conversation is deleted upstream. |\n"
                "| **Silence** (nothing comes) | The idle timeout of 60 s ends the run. |\n"
                "| **Files in** (chat files) | Images are uploaded; other files are named. |\n"
                "| **Files out** (platform files) | (to write: which files reach the chat) |\n")
    zh_table = ("## 遇到这些情况时\n\n| 情况 | 插件的做法 |\n|---|---|\n"
                "| **停止**（取消） | 调用平台的停止接口，已显示的文字保留。 |\n"
                "| **重置**（重置） | 删除平台上的旧会话，下一条消息开始新会话。 |\n"
                "| **传入文件**（文件） | 上传图片，其他文件在回答前注明没有发送。 |\n"
                "| **传出文件**（文件） | 平台生成的图片作为附件发到聊天中。 |\n")
    (tmp_path / "README.md").write_text("# X\n\n## Configuration\n\n- **Idle timeout (seconds)** (`idle-timeout`)\n"
                                        "- **Timeout  (seconds)**\n- **Advanced settings**\n\n" + en_table,
                                        encoding="utf-8")
    (tmp_path / "readme" / "README_zh_Hans.md").write_text(
        "# X\n\n## 配置\n\n- **空闲超时（秒）**（`idle-timeout`）\n- **超时时间（秒）**\n- **高级设置**\n\n" + zh_table,
        encoding="utf-8")
    # issue 33: the "What it does when…" table, every row, each a real answer, in both languages
    assert readme_problems(tmp_path, _ITEMS) == [
        "README.md: the '## What it does when…' table's **Files out** row is not written yet: "
        "'(to write: which files reach the chat)'",
        "readme/README_zh_Hans.md: the '## 遇到这些情况时' table has no **静默** row"]
    (tmp_path / "README.md").write_text((tmp_path / "README.md").read_text(encoding="utf-8").replace(
        "(to write: which files reach the chat)", "Images the platform makes are attached."), encoding="utf-8")
    (tmp_path / "readme" / "README_zh_Hans.md").write_text(
        (tmp_path / "readme" / "README_zh_Hans.md").read_text(encoding="utf-8")
        + "| **静默**（无输出） | 空闲超时 60 秒后结束运行。 |\n", encoding="utf-8")
    assert readme_problems(tmp_path, _ITEMS) == []
    assert names_label("**App API key** (`api-key`)", "App API key") and not names_label("App API key", "App API key")
    assert [i["name"] for i in form_fields(_ITEMS)] == ["idle-timeout", "timeout", "advanced-settings"]
    # issue 34 item 6: LangBot shows the page under its own route (a relative link is its 404 page), and a
    # line break inside a Chinese sentence renders as a stray space
    (tmp_path / "README.md").write_text("# X\n\nSee [the Chinese page](readme/README_zh_Hans.md) or "
                                        "[the site](https://example.com) and [below](#x).\n", encoding="utf-8")
    (tmp_path / "readme" / "README_zh_Hans.md").write_text(
        "# X\n\n第一行的句子在这里\n断开了。\n\n- 列表项、\n  `code` 继续\n\n中文 word\nEnglish 可以\n", encoding="utf-8")
    problems = readme_problems(tmp_path, [])
    assert [p for p in problems if "404" in p] == [
        "README.md:3: the link to 'readme/README_zh_Hans.md' leads to LangBot's 404 page (the plugin page is shown "
        "under LangBot's own route): link to an https:// address or leave the link out"], problems
    assert [p.split(":")[1] for p in problems if "stray space" in p] == ["3", "6"], problems


def test_form_checks_catch_the_problems() -> None:
    # issue 34 item 8: "claude executable" sat among capitalised labels
    items = [{"name": "executable", "type": "string", "label": {"en_US": "claude executable", "zh_Hans": "claude 程序"},
              "options": [{"name": "a", "label": {"en_US": "auto", "zh_Hans": "自动"}}]}]
    assert config_item_problems(items) == [
        "config item 'executable': label en_US 'claude executable' starts with a small letter; LangBot's form shows "
        "labels capitalised",
        "config item 'executable' option 'a': label en_US 'auto' starts with a small letter; LangBot's form shows "
        "labels capitalised"]
    # a show_if that compares a boolean with something else never holds: the field is not on the form
    assert never_shown(_ITEMS[3], _ITEMS) and not never_shown(_ITEMS[0], _ITEMS)
    shown_by_choice = {"name": "x", "type": "string", "show_if": {"field": "mode", "operator": "eq", "value": "ask"}}
    assert not never_shown(shown_by_choice, [*_ITEMS, {"name": "mode", "type": "select"}, shown_by_choice])


# the advanced-settings switch (runner_kit.config.ConfigSchema.load ignores an advanced field's stored
# value while it is off, so a field behind it must be hidden by it too)
ADVANCED_SHOW_IF = {"field": "advanced-settings", "operator": "eq", "value": True}
# how many fields the form shows with "Advanced settings" off and every choice at its default: what most
# owners set to make the plugin work (issue 34 item 8: LocalAgent showed 21, ACP 18, Claude Code and
# Codex 15). More than BASIC_FIELDS_MAX only where a field cannot move behind Advanced:
BASIC_FIELDS_MAX = 10
BASIC_FIELDS_ALLOWED = {
    # the contract suite (tests/contract/case_acp_agent_runner.py, test_steering.py, test_chat_experience.py)
    # sets Agent command line, Environment variables, LangBot tools, Messages sent while it works and
    # Hide reasoning without ticking Advanced settings, as an owner of the 0.3 form did; and an Agent
    # program of the owner's own is what an agent signs in with (tests/plugins/test_coding_agents_setup.py)
    "acp-agent-runner": 15,
    # the contract suite sets Follow-up messages and Hide reasoning without ticking Advanced settings
    "claude-code-agent": 12,
    # every field but Thread per is a LangBot 4.10 deerflow-api key: the migration copies its value and
    # writes no Advanced settings, so a field behind it would lose the migrated value
    "deerflow-agent": 12,
}


def _visible_basic(items: list[dict]) -> list[str]:
    defaults = {i["name"]: i.get("default") for i in items}

    def shown(item: dict) -> bool:
        cond = item.get("show_if")
        if not cond:
            return True
        value, op, want = defaults.get(cond["field"]), cond["operator"], cond["value"]
        return value == want if op == "eq" else value != want if op == "neq" else value in want

    return [i["name"] for i in items
            if not i.get("advanced") and i["name"] != "advanced-settings" and shown(i)]


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_advanced_fields_are_hidden_behind_advanced_settings(info: PluginInfo) -> None:
    items = [i for i in info.config_items if isinstance(i, dict)]
    names = [i["name"] for i in items]
    advanced = [i for i in items if i.get("advanced")]
    if not advanced:
        return
    assert "advanced-settings" in names, f"{info.dirname}: advanced fields but no advanced-settings switch"
    switch = names.index("advanced-settings")
    wrong = [i["name"] for i in advanced if i.get("show_if") != ADVANCED_SHOW_IF and not never_shown(i, items)]
    assert wrong == [], f"{info.dirname}: advanced fields not hidden by {ADVANCED_SHOW_IF}: {wrong}"
    above = [i["name"] for i in advanced if names.index(i["name"]) < switch]
    assert above == [], f"{info.dirname}: advanced fields above the Advanced settings switch: {above}"
    below = [i["name"] for i in items[switch + 1:] if not i.get("advanced") and not never_shown(i, items)]
    assert below == [], f"{info.dirname}: basic fields below the Advanced settings switch: {below}"


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_the_basic_form_is_short(info: PluginInfo) -> None:
    shown = _visible_basic([i for i in info.config_items if isinstance(i, dict)])
    limit = BASIC_FIELDS_ALLOWED.get(info.dirname, BASIC_FIELDS_MAX)
    assert len(shown) <= limit, f"{info.dirname}: {len(shown)} fields with Advanced settings off: {shown}"


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_listing_problems_are_none(info: PluginInfo) -> None:
    # issue 34 items 5 and 7: what LangBot's plugin list shows (icon, label, description)
    problems = listing_problems(info.directory)
    assert problems == [], f"{info.dirname}:\n" + "\n".join(problems)


def test_every_plugin_has_its_own_icon() -> None:
    # issue 34 item 5: twelve plugins shared one grey square
    problems = duplicate_icons([p.directory for p in PLUGINS])
    assert problems == [], "\n".join(problems)


_ICON_OK = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect width="64" height="64" rx="14" '
            'fill="#0891B2"/><path d="M20 44h24" stroke="#fff" stroke-width="6"/></svg>\n')
_DESCRIPTION_OK = {"en_US": "Use an Acme app behind a LangBot chat, with streaming answers and kept conversations.",
                   "zh_Hans": "将 Acme 应用作为 LangBot 对话背后的智能体，支持流式回复与会话保持。"}


def _listed_plugin(root: Path, name: str, *, label: dict[str, str] | None = None,
                   runner_label: dict[str, str] | None = None, description: dict[str, str] | None = None,
                   icon: str | bytes | None = _ICON_OK, icon_name: str = "assets/icon.svg") -> Path:
    """A plugin directory with just what the plugin list reads."""
    label = label or {"en_US": "Acme Agent", "zh_Hans": "Acme 智能体"}
    directory = root / name
    (directory / "components" / "runner").mkdir(parents=True)
    meta: dict[str, object] = {"author": "langbot-team", "name": name, "version": "0.3.0", "label": label,
                               "description": _DESCRIPTION_OK if description is None else description}
    if icon is not None:
        meta["icon"] = icon_name
        (directory / icon_name).parent.mkdir(parents=True, exist_ok=True)
        data = icon.encode() if isinstance(icon, str) else icon
        (directory / icon_name).write_bytes(data)
    manifest = {"apiVersion": "v1", "kind": "Plugin", "metadata": meta,
                "spec": {"components": {"Runner": {"fromDirs": [{"path": "components/runner/"}]}}}}
    runner = {"apiVersion": "langbot/v1", "kind": "Runner",
              "metadata": {"name": "default", "label": runner_label or label}, "spec": {"usages": ["agent"]}}
    (directory / "manifest.yaml").write_text(yaml.safe_dump(manifest, allow_unicode=True), encoding="utf-8")
    (directory / "components" / "runner" / "default.yaml").write_text(yaml.safe_dump(runner, allow_unicode=True),
                                                                      encoding="utf-8")
    return directory


def test_listing_checks_catch_the_problems(tmp_path: Path) -> None:
    # columns: a Chinese character is two; 13 fit ("WeKnora Agent"), "Claude Code …" was cut at 1440 px
    assert LABEL_MAX_COLUMNS == 13
    assert display_columns("WeKnora Agent") == 13 and display_columns("百炼智能体") == 10
    assert display_columns("WeKnora 智能体") == 14
    good = _listed_plugin(tmp_path, "good")
    assert listing_problems(good) == []

    # what the plugins had: the scaffold's grey square, its one-line description, a long label, and
    # a runner component that names the plugin differently
    bad = _listed_plugin(
        tmp_path, "bad", icon=PLACEHOLDER_ICON,
        label={"en_US": "Claude Code Agent", "zh_Hans": "Claude Code 智能体"},
        runner_label={"en_US": "Claude Code", "zh_Hans": "Claude Code 智能体"},
        description={"en_US": "Use Claude Code as the agent behind a LangBot chat.",
                     "zh_Hans": "将 Claude Code 作为 LangBot 对话背后的智能体。"},
    )
    problems = listing_problems(bad)
    assert [p.split(":")[0] for p in problems] == [
        "assets/icon.svg", "manifest.yaml", "manifest.yaml", "manifest.yaml", "manifest.yaml",
        "components/runner/default.yaml"], problems
    assert "the grey square `runners new` writes; it is not drawn yet" in problems[0]
    assert problems[1].startswith("manifest.yaml: description en_US is the placeholder `runners new` writes "
                                  "('Use Claude Code as the agent behind a LangBot chat.'); it is not written yet")
    assert problems[2].startswith("manifest.yaml: description zh_Hans is the placeholder")
    assert problems[3].startswith("manifest.yaml: label en_US 'Claude Code Agent' is 17 columns wide; LangBot's "
                                  "plugin list cuts it after 13")
    assert problems[4].startswith("manifest.yaml: label zh_Hans 'Claude Code 智能体' is 18 columns wide")
    assert problems[5].startswith("components/runner/default.yaml: label en_US 'Claude Code' is not "
                                  "manifest.yaml's 'Claude Code Agent'")

    # too short or missing descriptions; a real one that says "as the agent behind a LangBot chat" is fine
    short = _listed_plugin(tmp_path, "short", description={"en_US": "Acme agent.", "zh_Hans": ""})
    assert listing_problems(short) == [
        "manifest.yaml: description en_US 'Acme agent.' is 11 characters; write at least 40: what the plugin "
        "binds and what works",
        "manifest.yaml: description zh_Hans is missing (the plugin list shows it under the name)"]

    # icons: missing, not SVG/PNG, too large, not what the suffix says, drawn with fonts or other files
    assert listing_problems(_listed_plugin(tmp_path, "no-icon", icon=None)) == [
        "manifest.yaml: metadata.icon is not set (the plugin list shows no picture): add assets/icon.svg"]
    assert listing_problems(_listed_plugin(tmp_path, "jpeg", icon=b"\xff\xd8\xff", icon_name="assets/icon.jpg")) \
        == ["assets/icon.jpg: the icon is not an SVG or PNG file"]
    big = _ICON_OK.replace("</svg>", "<!--" + "x" * 21000 + "--></svg>")
    assert listing_problems(_listed_plugin(tmp_path, "big", icon=big)) == [
        f"assets/icon.svg: the icon is {len(big)} bytes, over 20480 (20 KB); a simple 64x64 SVG is well under 2 KB"]
    assert listing_problems(_listed_plugin(tmp_path, "png", icon=b"<svg/>", icon_name="assets/icon.png")) == [
        "assets/icon.png: the icon is not a PNG image"]
    assert listing_problems(_listed_plugin(tmp_path, "broken", icon="<svg><rect></svg>"))[0].startswith(
        "assets/icon.svg: the icon is not valid XML")
    fonts = _ICON_OK.replace("</svg>", '<text x="8" y="40">A</text><image href="https://x.example/a.png"/>'
                             '<use href="#a"/></svg>')
    assert listing_problems(_listed_plugin(tmp_path, "fonts", icon=fonts)) == [
        "assets/icon.svg: the icon contains text (it depends on the viewer's fonts: draw the glyph as paths or "
        "shapes)",
        "assets/icon.svg: the icon refers to 'https://x.example/a.png'; LangBot shows it as an image, which loads "
        "nothing else: draw it in the file"]

    # across the plugins: the same icon twice is refused, naming both files
    twin = _listed_plugin(tmp_path, "twin")
    assert duplicate_icons([good, twin, bad]) == [
        "good/assets/icon.svg is byte-identical to twin/assets/icon.svg: the plugin list shows them alike; give "
        "each plugin its own icon"]


# --- across the repository ---------------------------------------------------------------------


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(tree):
        where = f"{shown}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            if any(a.name.split(".")[0] == "subprocess" or a.name == "asyncio.subprocess" for a in node.names):
                found.append(f"{where}: imports subprocess")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == "subprocess" or node.module == "asyncio.subprocess":
                found.append(f"{where}: imports from {node.module}")
            if node.module.split(".")[0] == "httpx" and any(a.name == "AsyncClient" for a in node.names):
                found.append(f"{where}: imports httpx.AsyncClient")
            if node.module == "asyncio" and any(a.name.startswith("create_subprocess") for a in node.names):
                found.append(f"{where}: imports asyncio.create_subprocess_*")
        elif isinstance(node, ast.Attribute):
            if node.attr in ("create_subprocess_exec", "create_subprocess_shell"):
                found.append(f"{where}: uses {node.attr}")
            elif node.attr == "subprocess" and isinstance(node.value, ast.Name) and node.value.id == "asyncio":
                found.append(f"{where}: uses asyncio.subprocess")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "AsyncClient" and isinstance(f.value, ast.Name) \
                    and f.value.id == "httpx":
                found.append(f"{where}: creates httpx.AsyncClient (use runner_kit.http.shared_client)")
    return found


def test_http_clients_and_processes_only_in_the_kit() -> None:
    files = [
        p for p in ROOT.rglob("*.py")
        if not (set(p.relative_to(ROOT).parts) & SKIP_DIRS)
        and p.relative_to(ROOT).parts[0] not in SHARED_DIRS
        and not p.relative_to(ROOT).parts[0].startswith(".")
    ]
    assert any(p.is_relative_to(ROOT / "dify-agent") for p in files)
    violations = [v for f in files for v in _violations(f)]
    assert violations == [], "\n".join(violations)


def test_violation_finder_catches_the_patterns(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import subprocess\nimport asyncio\nimport httpx\n"
        "async def f():\n    await asyncio.create_subprocess_exec('x')\n    httpx.AsyncClient()\n"
    )
    assert len(_violations(probe)) == 3, _violations(probe)


# --- the suites every plugin belongs to (``runners new`` scaffolds the files; these name what is missing)


def _pkg(dirname: str) -> str:
    return dirname.replace("-", "_")


def test_every_plugin_is_in_the_contract_suite() -> None:
    from tests.contract.cases import CASES

    have = {c.plugin for c in CASES}
    missing = [f"tests/contract/case_{_pkg(p)}.py (for {p})" for p in IDS if p not in have]
    assert missing == [], "write the contract case (runners new scaffolds one): " + ", ".join(missing)
    assert have <= set(IDS), f"contract cases for plugins that do not exist: {sorted(have - set(IDS))}"


def test_every_contract_case_module_is_listed() -> None:
    """A case module on disk that PLUGIN_CASE_MODULES does not name would never run."""
    from tests.contract.cases import PLUGIN_CASE_MODULES

    on_disk = {p.stem for p in (ROOT / "tests" / "contract").glob("case_*.py")}
    unlisted = sorted(on_disk - set(PLUGIN_CASE_MODULES.values()))
    assert unlisted == [], f"add these to PLUGIN_CASE_MODULES in tests/contract/cases.py: {unlisted}"


def test_every_plugin_has_a_benchmark_entry() -> None:
    from bench.registry import CODING_AGENTS, HTTP_PLUGINS, IN_PROCESS_AGENTS

    have = {e.plugin for e in [*HTTP_PLUGINS, *CODING_AGENTS, *IN_PROCESS_AGENTS]}
    missing = [f"bench/entries/{_pkg(p)}.py (for {p})" for p in IDS if p not in have]
    assert missing == [], "write the benchmark entry (runners new scaffolds one): " + ", ".join(missing)
    assert have <= set(IDS), f"benchmark entries for plugins that do not exist: {sorted(have - set(IDS))}"


def test_every_plugin_has_its_own_tests() -> None:
    texts = [p.read_text(encoding="utf-8") for p in (ROOT / "tests" / "plugins").glob("test_*.py")]
    missing = [f"tests/plugins/test_{_pkg(p)}.py (for {p})" for p in IDS
               if not any(f'"{p}"' in text for text in texts)]
    assert missing == [], "no test module in tests/plugins names these plugins; write: " + ", ".join(missing)


E2E_PLUGINS = ROOT / "tests" / "e2e" / "test_plugins_e2e.py"


def _module_constant(path: Path, name: str) -> object:
    """A literal assigned at the top of ``path`` (read, not imported: importing the e2e suite starts
    its harness imports)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path.relative_to(ROOT)} no longer assigns {name}")


def test_every_plugin_is_in_the_e2e_list() -> None:
    # the e2e suite runs every contract case without prepare_host (LocalAgent has its own module) and
    # writes the list out so a case that goes missing fails there; it must not miss a new plugin
    from tests.contract.cases import CASES

    expected = _module_constant(E2E_PLUGINS, "EXPECTED")
    usage = _module_constant(E2E_PLUGINS, "USAGE")
    assert isinstance(expected, list) and isinstance(usage, set)
    want = {c.plugin for c in CASES if c.prepare_host is None}
    where = E2E_PLUGINS.relative_to(ROOT)
    assert not want - set(expected), f"{where}: add {sorted(want - set(expected))} to EXPECTED"
    assert not set(expected) - want, f"{where}: EXPECTED names plugins without a contract case: " \
        f"{sorted(set(expected) - want)}"
    assert expected == sorted(expected), f"{where}: keep EXPECTED sorted (the suite compares it sorted)"
    assert usage <= set(expected), f"{where}: USAGE names plugins not in EXPECTED: {sorted(usage - set(expected))}"


# plugin directory -> its suite against a real server (tests/real_peers/, run with the slow suites),
# or "none: <why no real server runs on this kind of machine>"
REAL_PEERS: dict[str, str] = {
    "acp-agent-runner": "tests/real_peers/coding_agents/test_acp_agent_runner_real.py",
    "claude-code-agent": "tests/real_peers/coding_agents/test_claude_code_agent_real.py",
    "codex-agent": "tests/real_peers/coding_agents/test_codex_agent_real.py",
    "deerflow-agent": "tests/real_peers/test_langgraph_real.py",
    "langflow-agent": "tests/real_peers/test_langflow_real.py",
    "licos-agent": "tests/real_peers/test_licos_real.py",
    "n8n-agent": "tests/real_peers/test_n8n_real.py",
    "coze-agent": "none: a hosted service; no server of it was found to run here (real-http-peers.md)",
    "dashscope-agent": "none: Alibaba Cloud Bailian is hosted only",
    "tbox-agent": "none: Ant Group Tbox is hosted only",
    "weknora-agent": "none: no server of it was found to run here (real-http-peers.md)",
    "dify-agent": "none yet: no registry ships the Dify server; real-dify.md tells how to run one from source",
    "local-agent": "none: its upstream is LangBot's own models (tests/e2e/test_local_agent_e2e.py runs it "
                   "in the real LangBot)",
}


def test_every_plugin_has_a_real_peer_row() -> None:
    missing = [p for p in IDS if p not in REAL_PEERS]
    assert missing == [], (
        f"tests/test_repo_check.py: add a REAL_PEERS row for {', '.join(missing)}: its suite under "
        "tests/real_peers/ where a real server runs on this machine, or 'none: <why>'"
    )
    stale = sorted(set(REAL_PEERS) - set(IDS))
    assert stale == [], f"tests/test_repo_check.py: REAL_PEERS rows for plugins that do not exist: {stale}"
    bad = [f"{p}: {v}" for p, v in REAL_PEERS.items()
           if not (v.startswith(("none: ", "none yet: ")) and len(v.split(":", 1)[1].strip()) > 10)
           and not (v.startswith("tests/real_peers/") and (ROOT / v).is_file())]
    assert bad == [], "REAL_PEERS rows that are neither an existing tests/real_peers/ file nor 'none: <why>':\n" \
        + "\n".join(bad)


def test_no_test_counts_on_xdist_group() -> None:
    """pytest-xdist 3.8 groups ``xdist_group`` tests by rewriting ``item._nodeid``, which pytest 9.2 no
    longer reads (the id lives in ``_id``): the mark is silently ignored and the tests it meant to keep
    in one worker run side by side. The sandbox tests once relied on it and failed CI; a test that
    must not run beside another has to be safe on its own (its own names, ports and processes)."""
    marked = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("*.py")
                    if path.name != "test_repo_check.py" and "xdist_group" in path.read_text(encoding="utf-8"))
    assert not marked, f"xdist_group is not honoured here (pytest 9.2 + pytest-xdist 3.8): {marked}"
