"""Runner configuration: the runner YAML's ``spec.config`` is the single source of keys, types and
defaults. The host injects no defaults and passes values through untouched (strings like "false"
included), so every runner loads its config through :class:`ConfigSchema`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import texts
from .errors import RunnerError, config_secrets

_STRING_TYPES = {"string", "text", "password", "secret", "select", "llm-model-selector"}
_BOOL_TYPES = {"boolean", "bool"}
_INT_TYPES = {"integer", "int"}
_FLOAT_TYPES = {"float", "number"}
_LIST_TYPES = {"array", "array[string]", "multi-select", "knowledge-base-multi-selector", "prompt-editor"}
_DICT_TYPES = {"json", "object"}
_TRUE = {"true", "1", "yes", "on", "y", "t"}
_FALSE = {"false", "0", "no", "off", "n", "f", ""}


@dataclass(frozen=True, slots=True)
class Field:
    """One declared config item."""

    name: str
    type: str
    default: Any = None
    required: bool = False
    options: tuple[str, ...] = ()
    allow_custom: bool = False
    minimum: float | None = None
    advanced: bool = False
    #: what the form calls it, per locale (``en_US``, ``zh_Hans``): named so in chat texts
    label: Mapping[str, str] | None = None

    @property
    def secret(self) -> bool:
        return self.type in {"secret", "password"}

    @property
    def positive(self) -> bool:
        """A time limit: 0 or blank means "no limit" (as LangBot reads ``timeout``), negative is an error."""
        return self.name == "timeout" or self.name.endswith("-timeout")


class Config(Mapping[str, Any]):
    """Validated config values, every declared key present (defaults applied)."""

    def __init__(self, values: dict[str, Any], secrets: list[str]):
        self._values = values
        self.secrets = secrets

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:  # never echo secret values
        return f"Config({sorted(self._values)})"


class ConfigSchema:
    """The declared config of one runner, loaded from its YAML."""

    def __init__(self, fields: list[Field]):
        self.fields = {f.name: f for f in fields}

    @classmethod
    def from_items(cls, items: list[dict[str, Any]]) -> ConfigSchema:
        fields = []
        for item in items:
            opts = tuple(
                str(o.get("name", o.get("value"))) if isinstance(o, dict) else str(o)
                for o in item.get("options") or ()
            )
            fields.append(
                Field(
                    name=item["name"],
                    type=str(item["type"]),
                    default=item.get("default"),
                    required=bool(item.get("required", False)),
                    options=opts,
                    allow_custom=bool(item.get("allow_custom", False)),
                    minimum=item.get("x-minimum"),
                    advanced=bool(item.get("advanced", False)),
                    label={str(k): str(v) for k, v in item["label"].items()}
                    if isinstance(item.get("label"), dict) else None,
                )
            )
        return cls(fields)

    def labels(self) -> dict[str, Mapping[str, str]]:
        """Config key -> locale -> what the form calls it (keys without a label left out)."""
        return {name: f.label for name, f in self.fields.items() if f.label}

    @classmethod
    def from_yaml(cls, path: str | Path) -> ConfigSchema:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader
        return cls.from_items(doc.get("spec", {}).get("config") or [])

    def load(self, raw: Mapping[str, Any] | None, *, required: bool = True) -> Config:
        """Coerce ``raw`` (ctx.config) against the schema; unknown keys pass through untouched.
        ``required=False`` leaves a required key that is not set as ``None`` / empty instead of
        raising (for :meth:`Adapter.check_setup`, which decides what a missing key means)."""
        raw = dict(raw or {})
        values: dict[str, Any] = {}
        secrets: list[str] = []
        advanced_on = True
        if "advanced-settings" in self.fields:
            advanced_on = _coerce(self.fields["advanced-settings"], raw.get("advanced-settings", False) or False)
        for name, field in self.fields.items():
            present = name in raw and raw[name] is not None and (advanced_on or not field.advanced)
            value = raw[name] if present else field.default
            if value is None:
                if field.required and required:
                    raise RunnerError("config.missing", f"config key '{name}' is required but not set")
                values[name] = None
                continue
            values[name] = _coerce(field, value)
            if field.required and required and values[name] in ("", [], {}):
                raise RunnerError("config.missing", f"config key '{name}' is required but empty")
            if field.secret and isinstance(values[name], str) and values[name]:
                secrets.append(values[name])
        for name, value in raw.items():
            if name not in values:
                values[name] = value
        # and what hides in any value: URL credentials, secret-named keys in JSON, NAME=value lines
        for name, value in values.items():
            secrets.extend(s for s in config_secrets(value, name) if s not in secrets)
        return Config(values, secrets)

    def untouched(self, raw: Mapping[str, Any] | None, former: Mapping[str, Any] | None = None) -> bool:
        """Whether ``raw`` is what LangBot 4.11.2 stores for a binding its owner never opened: it
        fills a new pipeline's runner config with each declared key's YAML ``default`` (``None``
        where the YAML has none), and a config made another way may have nothing at all. So: every
        declared key absent, ``None``, blank where there is no default, or its default (or, from
        ``former``, the default an earlier version declared). Keys the schema does not declare (the
        host's own fields) do not count."""
        raw = raw or {}
        former = former or {}
        for name, field in self.fields.items():
            value = raw.get(name)
            if value is None or value == field.default or (name in former and value == former[name]):
                continue
            if field.default is None and value in ("", [], {}):
                continue
            return False
        return True


#: what the chat reads when a binding was never set up by its owner (see :func:`not_set_up`)
NOT_SET_UP = ("This bot's agent is {agent}, which its owner has not set up yet: open the pipeline's AI settings "
              "and choose and configure a runner.")
NOT_SET_UP_ZH = "此机器人的智能体是 {agent}，但其所有者尚未完成设置：请打开流水线的 AI 设置，选择并配置一个运行器。"


def listed(raw: Any) -> list[str]:
    """A list setting as the form stores it: a list, or text with one item per comma or line."""
    items = raw if isinstance(raw, list) else str(raw or "").replace("\n", ",").split(",")
    return [s for s in (str(i).strip() for i in items) if s]


def not_set_up(agent: str) -> RunnerError:
    """``config.missing`` for a binding its owner never configured (LangBot binds a new pipeline to
    the first runner it lists, with that runner's YAML defaults): one line for the chat, shown as
    it is, that tells the owner what to do."""
    exc = RunnerError("config.missing", NOT_SET_UP.format(agent=agent))
    exc.chat = texts.Said(NOT_SET_UP, NOT_SET_UP_ZH, agent=agent)  # type: ignore[attr-defined]  # runner.drive shows it instead of the generic explanation
    return exc


def _invalid(field: Field, why: str) -> RunnerError:
    return RunnerError("config.invalid", f"config key '{field.name}' {why}")


def _coerce(field: Field, value: Any) -> Any:
    t = field.type
    if t in _BOOL_TYPES:
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise _invalid(field, "must be true or false")
    if t in _INT_TYPES or t in _FLOAT_TYPES:
        return _number(field, value, integer=t in _INT_TYPES)
    if t in _LIST_TYPES:
        if isinstance(value, str):
            value = _parse_json(field, value) if value.strip().startswith("[") else [
                v.strip() for v in value.split(",") if v.strip()
            ]
        if not isinstance(value, list):
            raise _invalid(field, "must be a list")
        return value
    if t in _DICT_TYPES:
        if isinstance(value, str):
            value = _parse_json(field, value) if value.strip() else {}
        if not isinstance(value, dict):
            raise _invalid(field, "must be a JSON object")
        return value
    # string-like (and unknown types: keep strings as strings)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        if t in _STRING_TYPES:
            raise _invalid(field, "must be a string")
        return value
    value = str(value).strip()
    if t == "select" and field.options and not field.allow_custom and value not in field.options:
        raise _invalid(field, f"must be one of: {', '.join(field.options)}")
    return value


def _number(field: Field, value: Any, *, integer: bool) -> float | int:
    if isinstance(value, bool):
        raise _invalid(field, "must be a number")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            if field.positive:
                return 0  # a blank timeout is "no limit", as the host reads it
            if field.default is not None and not isinstance(field.default, str):
                return _number(field, field.default, integer=integer)
            raise _invalid(field, "must be a number, got an empty value")
        try:
            num: float = float(text)
        except ValueError:
            raise _invalid(field, "must be a number") from None
    elif isinstance(value, (int, float)):
        num = float(value)
    else:
        raise _invalid(field, "must be a number")
    if not math.isfinite(num):
        raise _invalid(field, "must be a finite number")
    if field.positive and num < 0:
        raise _invalid(field, "must be 0 (no limit) or more")
    if field.minimum is not None and num < field.minimum:
        raise _invalid(field, f"must be at least {field.minimum:g}")
    if integer:
        if num != int(num):
            raise _invalid(field, "must be a whole number")
        return int(num)
    return num


def _parse_json(field: Field, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise _invalid(field, "is not valid JSON") from None
