"""``runners build``: stage a plugin with the shared kit vendored, validate it the way the SDK and
LangBot will, and package it with the SDK's own ``lbp build``.

Staging layout (``.stage/<plugin-dir>`` under the repository root, wiped on every build)::

    .stage/dify-agent/            a copy of dify-agent/ (no __pycache__, .env, dist), README.md and
                                  readme/README_zh_Hans.md included
    .stage/dify-agent/runner_kit/ a copy of the repository's runner_kit/

LangBot's plugin page shows ``readme/README_<language>.md`` when the UI is not English and
``README.md`` otherwise, so a plugin must ship both and the package must contain both.

The SDK build runs with the staging folder as its working directory (it only works on ``.``), so
it is serialised behind a lock and the previous working directory is always restored.
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import os
import re
import shutil
import threading
import unicodedata
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from .plugins import ROOT, PluginInfo

KIT_DIR = ROOT / "runner_kit"
STAGE_ROOT = ROOT / ".stage"
REQUIRED_AUTHOR = "langbot-team"
REQUIRED_RUNNER_NAME = "default"
MIN_VERSION = Version("0.3.0")
LOCALES = ("en_US", "zh_Hans")
# the plugin page (SDK GET_PLUGIN_README): readme/README_<language>.md for a non-English UI, else README.md
README_FILES = ("README.md", "readme/README_zh_Hans.md")
# the page is a narrow pane: a fourth column is already cut off at 1440 px
README_MAX_COLUMNS = 3

# never copied into the staging folder (plugin side) or the kit copy
_PLUGIN_SKIP = ("__pycache__", "*.pyc", "*.pyo", ".env", "dist", ".stage", ".pytest_cache", ".ruff_cache", "*.lbpkg")
_KIT_SKIP = ("__pycache__", "*.pyc", "*.pyo")
# never allowed inside a built package
_FORBIDDEN_PARTS = {".stage", "__pycache__", ".env", ".git", ".pytest_cache"}

_CWD_LOCK = threading.RLock()


class BuildError(Exception):
    """A plugin failed to stage, validate or package; ``problems`` are readable one-liners."""

    def __init__(self, plugin: str, problems: list[str]):
        self.plugin = plugin
        self.problems = list(problems)
        super().__init__(f"{plugin}: " + "; ".join(self.problems))

    def report(self) -> str:
        lines = [f"build failed for {self.plugin}:"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """chdir for the SDK helpers that only work on ``.`` (process-global, hence the lock)."""
    with _CWD_LOCK:
        previous = os.getcwd()
        os.chdir(path)
        try:
            yield
        finally:
            os.chdir(previous)


@contextlib.contextmanager
def _capture_warnings(logger_name: str) -> Iterator[list[str]]:
    """Collect the warnings a logger emits (the SDK logs and skips manifests it cannot load)."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = _Collect(level=logging.WARNING)
    logger = logging.getLogger(logger_name)
    old_propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate


# --- staging -----------------------------------------------------------------------------------


def stage_plugin(info: PluginInfo, stage_root: Path = STAGE_ROOT, kit_dir: Path = KIT_DIR) -> Path:
    """Copy the plugin and the shared kit into ``stage_root/<dir>`` (wiped first)."""
    if (info.directory / "runner_kit").exists():
        raise BuildError(info.name, [f"{info.dirname}/runner_kit exists; the kit is vendored at build time, remove it"])
    if not (kit_dir / "__init__.py").is_file():
        raise BuildError(info.name, [f"the shared kit is missing at {kit_dir}"])
    dest = Path(stage_root) / info.dirname
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(info.directory, dest, ignore=shutil.ignore_patterns(*_PLUGIN_SKIP))
    shutil.copytree(kit_dir, dest / "runner_kit", ignore=shutil.ignore_patterns(*_KIT_SKIP))
    return dest


# --- validation --------------------------------------------------------------------------------


@dataclass
class Validation:
    """What validating one plugin directory found."""

    problems: list[str] = field(default_factory=list)
    plugin_manifest: Any = None
    runner_components: list[Any] = field(default_factory=list)
    runner_manifests: list[Any] = field(default_factory=list)

    def add(self, problem: str) -> None:
        self.problems.append(problem)


def _i18n_problems(where: str, value: Any, what: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {what} must be a map with {' and '.join(LOCALES)}"]
    missing = [loc for loc in LOCALES if not (isinstance(value.get(loc), str) and value[loc].strip())]
    return [f"{where}: {what} lacks {', '.join(missing)}"] if missing else []


def config_item_problems(items: Any, *, descriptions: bool = False) -> list[str]:
    """Every config item has name and type and bilingual labels (and, optionally, descriptions)."""
    if items is None:
        return []
    if not isinstance(items, list):
        return ["spec.config must be a list"]
    problems: list[str] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(f"config item #{i + 1} is not a map")
            continue
        name = item.get("name")
        where = f"config item {name!r}" if name else f"config item #{i + 1}"
        if not isinstance(name, str) or not name:
            problems.append(f"{where}: missing name")
        elif name in seen:
            problems.append(f"{where}: declared twice")
        else:
            seen.add(name)
        if not isinstance(item.get("type"), str) or not item.get("type"):
            problems.append(f"{where}: missing type")
        problems += _i18n_problems(where, item.get("label"), "label")
        problems += _lowercase_label(where, item.get("label"))
        if descriptions or item.get("description") is not None:
            problems += _i18n_problems(where, item.get("description"), "description")
        for opt in item.get("options") or []:
            if isinstance(opt, dict):
                oname = opt.get("name", opt.get("value"))
                if oname is None:
                    problems.append(f"{where}: an option has no name")
                problems += _i18n_problems(f"{where} option {oname!r}", opt.get("label"), "label")
                problems += _lowercase_label(f"{where} option {oname!r}", opt.get("label"))
    return problems


def _lowercase_label(where: str, label: Any) -> list[str]:
    """A form label in English starts with a capital letter, as LangBot's own fields do
    ("Claude Code program", not "claude executable")."""
    text = label.get("en_US") if isinstance(label, dict) else None
    if isinstance(text, str) and text.strip() and text.strip()[0].islower():
        return [f"{where}: label en_US {text!r} starts with a small letter; LangBot's form shows labels capitalised"]
    return []


def never_shown(item: dict[str, Any], items: list[Any]) -> bool:
    """Whether LangBot's form can never show ``item``: its ``show_if`` compares a boolean field with
    something that is neither true nor false. That is how a key a migration still writes, but which
    does nothing, stays declared (LangBot's migration refuses an undeclared key) without being on the
    form."""
    cond = item.get("show_if")
    if not isinstance(cond, dict) or cond.get("operator") != "eq" or isinstance(cond.get("value"), bool):
        return False
    types = {i.get("name"): i.get("type") for i in items if isinstance(i, dict)}
    return types.get(cond.get("field")) in ("boolean", "bool")


def form_fields(items: Any) -> list[dict[str, Any]]:
    """The config items LangBot's form can show (see :func:`never_shown`)."""
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict) and isinstance(i.get("name"), str) and not never_shown(i, items)]


def _requirement_line(raw: str) -> str:
    """A requirements.txt line without its comment ('' for blank and comment lines)."""
    stripped = raw.strip()
    if stripped.startswith("#"):
        return ""
    return stripped.split(" #", 1)[0].strip()


def requirement_problems(path: Path) -> list[str]:
    """requirements.txt holds only plain PEP 508 requirements (no pip options, URLs or paths)."""
    if not path.is_file():
        return ["requirements.txt is missing"]
    problems = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = _requirement_line(raw)
        if not line:
            continue
        if line.startswith("-"):
            problems.append(f"requirements.txt line {n}: pip options are not allowed ({line!r})")
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(f"requirements.txt line {n}: not a PEP 508 requirement ({line!r}: {exc})")
            continue
        if req.url:
            problems.append(f"requirements.txt line {n}: direct URL references are not allowed ({line!r})")
    return problems


def parse_requirements(path: Path) -> list[Requirement]:
    """The requirements of a valid requirements.txt (invalid lines skipped)."""
    out = []
    if not path.is_file():
        return out
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = _requirement_line(raw)
        if not line or line.startswith("-"):
            continue
        with contextlib.suppress(InvalidRequirement):
            out.append(Requirement(line))
    return out


def _module_names(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Try):
            names |= _module_names(node.body) | _module_names(node.orelse) | _module_names(node.finalbody)
        elif isinstance(node, ast.If):
            names |= _module_names(node.body) | _module_names(node.orelse)
    return names


def _defines_class(py: Path, attr: str) -> bool:
    try:
        tree = ast.parse(py.read_text(encoding="utf-8"), filename=str(py))
    except SyntaxError:
        return False
    return attr in _module_names(tree.body)


def _check_execution(v: Validation, base: Path, rel_dir: str, execution: Any, what: str) -> None:
    if execution is None:
        v.add(f"{what}: execution.python is missing")
        return
    py = (base / rel_dir / execution.python.path).resolve()
    if not py.suffix:
        py = py.with_suffix(".py")
    if not py.is_file():
        v.add(f"{what}: execution.python.path {execution.python.path!r} does not exist")
    elif not _defines_class(py, execution.python.attr):
        v.add(f"{what}: {py.name} does not define {execution.python.attr!r}")


def build_runner_manifest(plugin_manifest: Any, component: Any) -> Any:
    """A ``RunnerManifest`` built the way the SDK's LIST_RUNNERS does (raises when invalid)."""
    from langbot_plugin.api.entities.builtin.runner.manifest import RunnerManifest

    spec = component.manifest.get("spec") or {}
    runner_name = component.metadata.name
    author = plugin_manifest.metadata.author
    name = plugin_manifest.metadata.name
    if "event" in (spec.get("usages") or []) and not spec.get("events"):
        raise ValueError("Event usage requires an explicit spec.events declaration")
    return RunnerManifest(
        id=f"plugin:{author}/{name}/{runner_name}",
        component_kind=component.kind,
        usages=spec.get("usages"),
        supported_event_patterns=spec.get("events") or ["*"],
        name=runner_name,
        label=component.metadata.label.to_dict(),
        description=component.metadata.description.to_dict() if component.metadata.description is not None else None,
        capabilities=spec.get("capabilities") or {},
        permissions=spec.get("permissions") or {},
        config_schema=spec.get("config") or [],
        metadata={"plugin_author": author, "plugin_name": name, "runner_name": runner_name},
    )


def _short_validation_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            parts = []
            for e in errors():
                loc = ".".join(str(x) for x in e.get("loc", ()))
                parts.append(f"{loc}: {e.get('msg')}" + (f" (got {e['input']!r})" if "input" in e and not isinstance(
                    e["input"], (dict, list)) else ""))
            if parts:
                return "; ".join(parts)
        except Exception:  # noqa: BLE001 - fall back to the plain message
            pass
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def validate_plugin(directory: Path) -> Validation:
    """Validate a plugin directory (source or staged) like ``lbp build``, LIST_RUNNERS and the
    migration will; never raises for plugin problems, returns them."""
    from langbot_plugin.api.definition.components.manifest import InvalidRunnerManifest
    from langbot_plugin.utils.discover.engine import ComponentDiscoveryEngine

    directory = Path(directory).resolve()
    v = Validation()
    if not (directory / "manifest.yaml").is_file():
        v.add("manifest.yaml is missing")
        return v

    # (a) the plugin manifest and its components, loaded exactly as buildplugin does
    with working_directory(directory), _capture_warnings("langbot_plugin.utils.discover.engine") as warnings:
        engine = ComponentDiscoveryEngine()
        try:
            plugin_manifest = engine.load_component_manifest(path="manifest.yaml", owner="builtin", no_save=True)
            if plugin_manifest is None:
                v.add("manifest.yaml is not a valid plugin manifest" + (f" ({warnings[-1]})" if warnings else ""))
                return v
            v.plugin_manifest = plugin_manifest
            components = []
            groups = (plugin_manifest.spec or {}).get("components") or {}
            for group in groups.values():
                components += engine.load_blueprint_comp_group(group, owner="builtin", no_save=True)
        except InvalidRunnerManifest as exc:
            v.add(str(exc))
            return v
        except Exception as exc:  # noqa: BLE001 - any loader failure is a plugin problem
            v.add(f"loading the manifests failed: {type(exc).__name__}: {exc}")
            return v
    for w in warnings:
        v.add(f"the SDK skipped a component manifest: {w}")

    meta = plugin_manifest.metadata
    if plugin_manifest.kind != "Plugin":
        v.add(f"manifest.yaml kind is {plugin_manifest.kind!r}, expected 'Plugin'")
    if meta.author != REQUIRED_AUTHOR:
        v.add(f"metadata.author is {meta.author!r}; LangBot's migration only binds {REQUIRED_AUTHOR!r}")
    try:
        if Version(str(meta.version)) < MIN_VERSION:
            v.add(f"metadata.version {meta.version} is below {MIN_VERSION}")
    except InvalidVersion:
        v.add(f"metadata.version {meta.version!r} is not a version number")
    v.problems += _i18n_problems("manifest.yaml", plugin_manifest.manifest["metadata"].get("label"), "label")
    v.problems += _i18n_problems("manifest.yaml", plugin_manifest.manifest["metadata"].get("description"), "description")
    icon = (meta.icon or "").strip()
    if icon and not (directory / icon).is_file():
        v.add(f"metadata.icon {icon!r} does not exist")
    _check_execution(v, directory, "", plugin_manifest.execution, "manifest.yaml")

    runners = [c for c in components if c.kind == "Runner"]
    v.runner_components = runners
    if not runners:
        v.add("no Runner component found under spec.components.Runner.fromDirs")
    names = [c.metadata.name for c in runners]
    if runners and REQUIRED_RUNNER_NAME not in names:
        v.add(f"no runner named {REQUIRED_RUNNER_NAME!r} (found {', '.join(names)}); the migration targets "
              f"plugin:{REQUIRED_AUTHOR}/{meta.name}/{REQUIRED_RUNNER_NAME}")
    for comp in runners:
        where = f"runner {comp.metadata.name!r} ({comp.rel_path})"
        spec = comp.manifest.get("spec") or {}
        # (b) the RunnerManifest LIST_RUNNERS builds (extra=forbid on capabilities/permissions)
        try:
            v.runner_manifests.append(build_runner_manifest(plugin_manifest, comp))
        except Exception as exc:  # noqa: BLE001 - pydantic or ValueError
            v.add(f"{where}: LangBot would skip this runner (invalid RunnerManifest): {_short_validation_error(exc)}")
        # (c) usages
        if not spec.get("usages"):
            v.add(f"{where}: spec.usages is required")
        # (d) config items
        v.problems += [f"{where}: {p}" for p in config_item_problems(spec.get("config"))]
        v.problems += _i18n_problems(where, comp.manifest["metadata"].get("label"), "label")
        _check_execution(v, directory, os.path.dirname(comp.rel_path), comp.execution, where)
    # (e) requirements
    v.problems += requirement_problems(directory / "requirements.txt")
    # (f) the plugin page in English and Chinese
    for rel in README_FILES:
        if not (directory / rel).is_file():
            v.add(f"{rel} is missing (LangBot shows it on the plugin page)")
    return v


# --- the plugin page (README) ------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DELIMITER_CELL = re.compile(r"^\s*:?-+:?\s*$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def _table_cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return re.split(r"(?<!\\)\|", s)


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) for the lines of a markdown text that are not inside fenced code."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)[0]
            elif m.group(1)[0] == fence:
                fence = None
            continue
        if fence is None:
            out.append((n, line))
    return out


def markdown_tables(text: str) -> list[tuple[int, int]]:
    """(header line number, column count) of every markdown table outside fenced code."""
    lines = _outside_fences(text)
    tables = []
    for (hn, header), (dn, delim) in zip(lines, lines[1:], strict=False):
        if dn == hn + 1 and "|" in header and "|" in delim and all(
            _DELIMITER_CELL.match(c) for c in _table_cells(delim)
        ):
            tables.append((hn, max(len(_table_cells(header)), len(_table_cells(delim)))))
    return tables


def _headings(text: str) -> list[int]:
    return [len(m.group(1)) for _, line in _outside_fences(text) if (m := _HEADING.match(line))]


_CJK_CHAR = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
_CJK_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uffef]")  # 、，。：（）… no space belongs next to them
_LINK = re.compile(r"\]\(([^)\s]*)[^)]*\)")
_BLOCK_START = re.compile(r"^\s*(#|\||[-*+]\s|>|\d+[.)]\s|<)")


def relative_links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every markdown link outside fenced code that is not an absolute web address or
    an anchor: LangBot renders the plugin page under its own route, where such a link is its 404 page."""
    return [(n, m.group(1)) for n, line in _outside_fences(text) for m in _LINK.finditer(line)
            if not re.match(r"(https?://|mailto:|#)", m.group(1))]


def broken_cjk_lines(text: str) -> list[int]:
    """Lines outside fenced code that end inside a Chinese sentence the next line goes on with:
    markdown renders such a line break as a space, which shows as a stray gap between two Chinese
    characters or next to Chinese punctuation (a space between a Chinese word and a Latin one is usual)."""
    lines = _outside_fences(text)
    out = []
    for (n, line), (m, after) in zip(lines, lines[1:], strict=False):
        tail, head = line.rstrip(), after.strip()
        cjk = (_CJK_CHAR.match(tail[-1]) and _CJK_CHAR.match(head[0])) if tail and head else False
        punct = bool(tail and head and (_CJK_PUNCT.match(tail[-1]) or _CJK_PUNCT.match(head[0])))
        if m == n + 1 and (cjk or punct) and not _BLOCK_START.match(after) and "|" not in line:
            out.append(n)
    return out


# the locale of each page's form labels: LangBot shows the zh_Hans labels with the Chinese page
README_LOCALES = dict(zip(README_FILES, LOCALES, strict=True))


def names_label(text: str, label: str) -> bool:
    """The page names a setting by the label its form shows, in bold: ``**App API key**`` (the key
    may follow it, ``**App API key** (`api-key`)``); a label's spaces may be any run of blanks."""
    words = [re.escape(w) for w in label.split()]
    return bool(words) and re.search(r"\*\*" + r"\s+".join(words) + r"\*\*", text) is not None


def unnamed_fields(text: str, items: Any, locale: str) -> list[str]:
    """The form's fields (:func:`form_fields`) a page in ``locale`` does not name by their label."""
    out = []
    for item in form_fields(items):
        label = item.get("label")
        text_label = label.get(locale) if isinstance(label, dict) else None
        if isinstance(text_label, str) and text_label.strip() and not names_label(text, text_label):
            out.append(f"**{text_label.strip()}** (`{item['name']}`)")
    return out


def readme_problems(directory: Path, items: Any) -> list[str]:
    """The plugin page in both languages: present, naming every field of the runner form
    (``items``, the runner YAML's ``spec.config``) by the label the form shows in that page's
    language, tables at most ``README_MAX_COLUMNS`` wide, no relative links, no line break inside a
    Chinese sentence, and the Chinese page a whole translation (same headings)."""
    directory = Path(directory)
    problems: list[str] = []
    texts: dict[str, str] = {}
    for rel in README_FILES:
        path = directory / rel
        if not path.is_file():
            problems.append(f"{rel} is missing (LangBot shows it on the plugin page)")
            continue
        text = texts[rel] = path.read_text(encoding="utf-8")
        missing = unnamed_fields(text, items, README_LOCALES[rel])
        if missing:
            problems.append(f"{rel} does not name these settings by the label the form shows beside them "
                            f"({README_LOCALES[rel]}), in bold: {', '.join(missing)}")
        for line, columns in markdown_tables(text):
            if columns > README_MAX_COLUMNS:
                problems.append(f"{rel}:{line}: a table has {columns} columns; at most {README_MAX_COLUMNS} fit "
                                "LangBot's plugin page (move details into text or bullets below it)")
        for line, target in relative_links(text):
            problems.append(f"{rel}:{line}: the link to {target!r} leads to LangBot's 404 page (the plugin page is "
                            "shown under LangBot's own route): link to an https:// address or leave the link out")
        for line in broken_cjk_lines(text):
            problems.append(f"{rel}:{line}: a line break inside a Chinese sentence shows as a stray space on "
                            "the plugin page: join the line with the next one")
        problems += [f"{rel}: {p}" for p in behaviour_table_problems(text, README_LOCALES[rel])]
    english, chinese = (texts.get(rel) for rel in README_FILES)
    if english is not None and chinese is not None:
        zh = README_FILES[1]
        if not _CJK.search(chinese):
            problems.append(f"{zh} has no Chinese text")
        if _headings(chinese) != _headings(english):
            problems.append(f"{zh} has headings {_headings(chinese)} but README.md has {_headings(english)} "
                            "(translate the whole page, section by section)")
    return problems


# What every plugin page says about the moments an owner asks about first (issue 33): what a stop,
# a reset and a silent platform do, and which files go in and out. One table, these rows, in both
# languages, each cell a real answer.
BEHAVIOUR_HEADINGS = {"en_US": "## What it does when…", "zh_Hans": "## 遇到这些情况时"}
BEHAVIOUR_ROWS = {
    "en_US": ("**Stop**", "**Reset**", "**Silence**", "**Files in**", "**Files out**"),
    "zh_Hans": ("**停止**", "**重置**", "**静默**", "**传入文件**", "**传出文件**"),
}

# how ``runners new`` starts each cell: refused until the plugin's author says what really happens
BEHAVIOUR_NOT_WRITTEN = {"en_US": "(to write:", "zh_Hans": "（待填写："}


def behaviour_table_problems(text: str, locale: str) -> list[str]:
    """What is missing from the page's "What it does when…" table (:data:`BEHAVIOUR_ROWS`)."""
    heading = BEHAVIOUR_HEADINGS[locale]
    lines = text.splitlines()
    if heading not in lines:
        return [f"no {heading!r} section (stop, reset, silence, files in, files out)"]
    start = lines.index(heading) + 1
    section = []
    for line in lines[start:]:
        if line.startswith("## "):
            break
        section.append(line)
    cells = {}
    for line in section:
        parts = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(parts) >= 2:
            cells[parts[0]] = parts[1]
    problems = []
    for row in BEHAVIOUR_ROWS[locale]:
        said = next((v for k, v in cells.items() if k.startswith(row)), None)
        if said is None:
            problems.append(f"the {heading!r} table has no {row} row")
        elif len(said.strip(" .…")) < 12 or said.startswith(BEHAVIOUR_NOT_WRITTEN[locale]):
            problems.append(f"the {heading!r} table's {row} row is not written yet: {said!r}")
    return problems


# --- the plugin list (label, description, icon) --------------------------------------------------

# LangBot 4.11.2's plugin list (and its runner picker) shows each plugin as its icon, its label and
# its description. At 1440 px a label is cut after about 13 columns ("Claude Code …"); a Chinese
# character is two columns wide.
LABEL_MAX_COLUMNS = 13
DESCRIPTION_MIN_CHARS = {"en_US": 40, "zh_Hans": 20}
ICON_MAX_BYTES = 20 * 1024
ICON_SUFFIXES = (".svg", ".png")
# what ``runners new`` writes before the plugin's own icon and description exist: the check refuses
# both as not written yet
PLACEHOLDER_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64" width="64" height="64">'
    '<rect width="64" height="64" rx="14" fill="#444"/></svg>\n'
)
PLACEHOLDER_DESCRIPTIONS = {
    "en_US": re.compile(r"Use (.+) as the agent behind a LangBot chat\.?"),
    "zh_Hans": re.compile(r"将\s*(.+?)\s*作为 ?LangBot ?对话背后的智能体。?"),
}
_SVG_FORBIDDEN = {"script": "a script", "foreignObject": "a foreignObject",
                  "text": "text (it depends on the viewer's fonts: draw the glyph as paths or shapes)"}


def display_columns(text: str) -> int:
    """How wide a text is in a list, in Latin columns: a CJK (wide or full-width) character is two."""
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def _yaml_doc(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _runner_yamls(directory: Path, manifest: dict[str, Any]) -> list[Path]:
    """The Runner component manifests under the plugin manifest's ``Runner.fromDirs``."""
    dirs = (((manifest.get("spec") or {}).get("components") or {}).get("Runner") or {}).get("fromDirs") or []
    found = []
    for entry in dirs:
        base = directory / str(entry.get("path", "")) if isinstance(entry, dict) else None
        if base is None or not base.is_dir():
            continue
        for path in sorted([*base.glob("*.yaml"), *base.glob("*.yml")]):
            doc = _yaml_doc(path)
            if isinstance(doc, dict) and doc.get("kind") == "Runner":
                found.append(path)
    return found


def icon_path(directory: Path) -> Path | None:
    """The icon file the plugin manifest names (None when it names none)."""
    doc = _yaml_doc(Path(directory) / "manifest.yaml")
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    icon = meta.get("icon") if isinstance(meta, dict) else None
    return Path(directory) / icon.strip() if isinstance(icon, str) and icon.strip() else None


def _icon_problems(directory: Path, icon: Any) -> list[str]:
    if not isinstance(icon, str) or not icon.strip():
        return ["manifest.yaml: metadata.icon is not set (the plugin list shows no picture): add assets/icon.svg"]
    rel = icon.strip()
    path = directory / rel
    if not path.is_file():
        return [f"manifest.yaml: metadata.icon {rel!r} does not exist"]
    if path.suffix.lower() not in ICON_SUFFIXES:
        return [f"{rel}: the icon is not an SVG or PNG file"]
    data = path.read_bytes()
    if len(data) > ICON_MAX_BYTES:
        return [f"{rel}: the icon is {len(data)} bytes, over {ICON_MAX_BYTES} ({ICON_MAX_BYTES // 1024} KB); a "
                "simple 64x64 SVG is well under 2 KB"]
    if data == PLACEHOLDER_ICON.encode():
        return [f"{rel}: the icon is the grey square `runners new` writes; it is not drawn yet: draw the "
                "platform's own (a 64x64 SVG, a coloured rounded square with a bold white glyph)"]
    if path.suffix.lower() == ".png":
        return [] if data.startswith(b"\x89PNG\r\n\x1a\n") else [f"{rel}: the icon is not a PNG image"]
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        return [f"{rel}: the icon is not valid XML ({exc})"]
    if root.tag.rsplit("}", 1)[-1] != "svg":
        return [f"{rel}: the icon is not an SVG (its root element is {root.tag!r})"]
    problems = []
    for element in root.iter():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag in _SVG_FORBIDDEN:
            problems.append(f"{rel}: the icon contains {_SVG_FORBIDDEN[tag]}")
        for name, value in element.attrib.items():
            if name.rsplit("}", 1)[-1] == "href" and not value.startswith("#"):
                problems.append(f"{rel}: the icon refers to {value!r}; LangBot shows it as an image, which "
                                "loads nothing else: draw it in the file")
    return sorted(set(problems))


def _i18n(value: Any, locale: str) -> str | None:
    text = value.get(locale) if isinstance(value, dict) else None
    return text.strip() if isinstance(text, str) and text.strip() else None


def listing_problems(directory: Path) -> list[str]:
    """What LangBot's plugin list shows of the plugin: an icon of its own (an SVG or PNG, small, not the
    scaffold's grey square), a real description in both languages (not missing, not a one-line
    placeholder), a label that fits (at most ``LABEL_MAX_COLUMNS`` columns, a Chinese character
    counting two) and is the same as every runner component's label. ``duplicate_icons`` compares
    the icons across plugins."""
    directory = Path(directory)
    manifest = _yaml_doc(directory / "manifest.yaml")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("metadata"), dict):
        return ["manifest.yaml is missing or has no metadata"]
    meta = manifest["metadata"]
    problems = _icon_problems(directory, meta.get("icon"))
    for locale in LOCALES:
        text = _i18n(meta.get("description"), locale)
        if text is None:
            problems.append(f"manifest.yaml: description {locale} is missing (the plugin list shows it under the "
                            "name)")
        elif PLACEHOLDER_DESCRIPTIONS[locale].fullmatch(text):
            problems.append(f"manifest.yaml: description {locale} is the placeholder `runners new` writes "
                            f"({text!r}); it is not written yet: say what the plugin binds and what works "
                            "(streaming, kept conversations, files, tools or approvals)")
        elif len(text) < DESCRIPTION_MIN_CHARS[locale]:
            problems.append(f"manifest.yaml: description {locale} {text!r} is {len(text)} characters; write at "
                            f"least {DESCRIPTION_MIN_CHARS[locale]}: what the plugin binds and what works")
    labels = {locale: _i18n(meta.get("label"), locale) for locale in LOCALES}
    for locale, label in labels.items():
        if label is None:
            problems.append(f"manifest.yaml: label {locale} is missing")
        elif (width := display_columns(label)) > LABEL_MAX_COLUMNS:
            problems.append(f"manifest.yaml: label {locale} {label!r} is {width} columns wide; LangBot's plugin "
                            f"list cuts it after {LABEL_MAX_COLUMNS} (a Chinese character counts two): shorten it "
                            "here and in the runner component")
    for path in _runner_yamls(directory, manifest):
        rel = path.relative_to(directory).as_posix()
        doc = _yaml_doc(path)
        comp_label = (doc.get("metadata") or {}).get("label") if isinstance(doc, dict) else None
        for locale, label in labels.items():
            theirs = _i18n(comp_label, locale)
            if label is not None and theirs != label:
                problems.append(f"{rel}: label {locale} {theirs!r} is not manifest.yaml's {label!r}; LangBot shows "
                                "both (plugin list, runner picker): use the same name in both files")
    return problems


def duplicate_icons(directories: list[Path]) -> list[str]:
    """Plugins whose icons are byte for byte the same file: the plugin list shows them alike."""
    by_content: dict[bytes, list[str]] = {}
    for directory in directories:
        path = icon_path(directory)
        if path is not None and path.is_file():
            by_content.setdefault(path.read_bytes(), []).append(f"{Path(directory).name}/"
                                                                f"{path.relative_to(directory).as_posix()}")
    return [f"{same[0]} is byte-identical to {', '.join(same[1:])}: the plugin list shows them alike; give each "
            "plugin its own icon" for same in by_content.values() if len(same) > 1]


# --- packaging ---------------------------------------------------------------------------------


def sdk_build(plugin_dir: Path, out_dir: Path) -> Path:
    """Run the SDK's ``lbp build`` on ``plugin_dir`` (its output is captured, not printed)."""
    from langbot_plugin.cli.commands.buildplugin import build_plugin_process

    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    with working_directory(Path(plugin_dir)), contextlib.redirect_stdout(buf):
        result = build_plugin_process(str(out_dir))
    if not result:
        raise RuntimeError("the SDK build produced no package: " + " | ".join(buf.getvalue().strip().splitlines()[-3:]))
    return Path(result)


def package_problems(path: Path) -> list[str]:
    """What must not (or must) be inside a built package."""
    problems = []
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    for n in names:
        parts = set(n.replace("\\", "/").split("/"))
        bad = parts & _FORBIDDEN_PARTS
        if bad or n.endswith((".pyc", ".pyo", ".lbpkg")):
            problems.append(f"package contains {n}")
    for required in ("manifest.yaml", "requirements.txt", "runner_kit/__init__.py", *README_FILES):
        if required not in names:
            problems.append(f"package lacks {required}")
    return problems


def build_plugin(
    info: PluginInfo,
    out_dir: Path,
    *,
    stage_root: Path = STAGE_ROOT,
    kit_dir: Path = KIT_DIR,
) -> Path:
    """Stage, validate and package one plugin; returns the .lbpkg path or raises BuildError."""
    out_dir = Path(out_dir).resolve()
    stage_root = Path(stage_root).resolve()
    if out_dir == stage_root or stage_root in out_dir.parents:
        raise BuildError(info.name, [f"the output directory {out_dir} must not be inside {stage_root}"])
    try:
        staged = stage_plugin(info, stage_root, kit_dir)
    except BuildError:
        raise
    except OSError as exc:
        raise BuildError(info.name, [f"staging failed: {exc}"]) from exc
    result = validate_plugin(staged)
    if result.problems:
        raise BuildError(info.name, result.problems)
    expected = f"{result.plugin_manifest.metadata.author}-{result.plugin_manifest.metadata.name}-" \
               f"{result.plugin_manifest.metadata.version}.lbpkg"
    target = out_dir / expected
    if target.exists():
        target.unlink()
    try:
        path = sdk_build(staged, out_dir)
    except Exception as exc:  # noqa: BLE001 - the SDK may raise anything
        raise BuildError(info.name, [f"lbp build failed: {type(exc).__name__}: {exc}"]) from exc
    problems = package_problems(path)
    if problems:
        path.unlink(missing_ok=True)
        raise BuildError(info.name, problems)
    return path


def build_all(
    infos: list[PluginInfo],
    out_dir: Path,
    *,
    stage_root: Path = STAGE_ROOT,
    on_built: Callable[[PluginInfo, Path], None] | None = None,
) -> tuple[list[Path], list[BuildError]]:
    """Build every plugin; keeps going after a failure and returns (built, failures)."""
    built: list[Path] = []
    failures: list[BuildError] = []
    for info in infos:
        try:
            path = build_plugin(info, out_dir, stage_root=stage_root)
        except BuildError as exc:
            failures.append(exc)
            continue
        built.append(path)
        if on_built is not None:
            on_built(info, path)
    return built, failures
