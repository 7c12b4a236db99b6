"""A Dify Human Input form as a question in the chat, and the answer back as Dify's submit body.

Shapes (langgenius/dify):
- the ``human_input_required`` stream event: ``web/types/workflow.ts`` ``HumanInputRequiredResponse``
  = ``{task_id, workflow_run_id, event, data: {form_id, node_id, node_title, form_content, inputs,
  actions, form_token, resolved_default_values, display_in_ui, expiration_time}}``; ``form_token`` is
  null for an Email-delivered form, which the API cannot answer (docs.dify.ai "Human Input API
  Integration Flow"); Dify 1.14.0-rc1 sent the event with empty data (langgenius/dify#35504);
- an input: ``{type: paragraph | text_input | select | file | file-list, output_variable_name,
  default | placeholder, option_source: {type, value: [..]}}``; an action: ``{id, title,
  button_style}`` (``web/app/components/workflow/nodes/human-input/types.ts``; docs.dify.ai "Get
  Human Input Form" example);
- the submit body ``{inputs: {output_variable_name: value}, action: <action id>, user}``
  (``api/controllers/common/human_input.py`` ``HumanInputFormSubmitPayload``;
  ``api/controllers/service_api/app/human_input_form.py``): paragraph and select take a string.

How the chat is asked (InteractionRequest: actions only, or exactly one field):
- ``actions``: a form without inputs: one button per action (the Dify action id is the button id);
- ``choice``: one select input and one action: one button per option (``opt-<i>``);
- ``field``: one text input and one action: one text field named after the input;
- ``typed``: anything else: the question lists the inputs and the actions, the answer is typed
  (``name: value`` lines and ``action: <number or name>``).
Every mode also takes a typed reply in the next message.

The kit's question machinery (``runner_kit.approvals``) does the asking and the reading: ``choice``
and ``field`` are a kit :class:`Question` (``interaction_request`` / ``from_submission``, the field
keeping the input's name), a number or a name is matched with ``pick``, and ``name: value`` lines
are cut with ``read_lines``. What stays here is Dify's side: the form's shapes, its action ids on
the ``actions`` buttons, and what a typed form needs before it can be submitted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from runner_kit import approvals as ap
from runner_kit.approvals import Option, Question

TEXT_TYPES = ("paragraph", "text_input", "text-input", "text")
FILE_TYPES = ("file", "file-list")
_OUTPUT_VAR = re.compile(r"\{\{#\$output\.([A-Za-z0-9_]+)#\}\}")
_ACTION_KEYS = ("action", "操作", "选择")
_ACTION = "\x00action"  # what an action key names in a typed reply (no input is called that)
MAX_BUTTONS = ap.MAX_CHOICES


@dataclass(slots=True)
class Input:
    name: str
    type: str
    options: list[str] = field(default_factory=list)
    default: str = ""

    @property
    def is_file(self) -> bool:
        return self.type in FILE_TYPES

    @property
    def is_select(self) -> bool:
        return self.type == "select"


@dataclass(slots=True)
class Form:
    """What the chat needs of one paused form (kept in conversation state as :meth:`to_record`)."""

    title: str
    content: str
    inputs: list[Input]
    actions: list[dict[str, str]]  # [{"id", "title", "style"}]
    mode: str = "typed"

    @classmethod
    def from_event(cls, data: dict[str, Any]) -> Form:
        defaults = data.get("resolved_default_values") if isinstance(data.get("resolved_default_values"), dict) else {}
        inputs: list[Input] = []
        for raw in data.get("inputs") or []:
            if not isinstance(raw, dict) or not raw.get("output_variable_name"):
                continue
            name = str(raw["output_variable_name"])
            source = raw.get("option_source") if isinstance(raw.get("option_source"), dict) else {}
            options = [str(o) for o in (source.get("value") or raw.get("options") or []) if str(o)]
            inputs.append(Input(name=name, type=str(raw.get("type") or "paragraph"), options=options,
                                default=str(defaults.get(name) or "")))
        actions = [{"id": str(a["id"]), "title": str(a.get("title") or a["id"]),
                    "style": str(a.get("button_style") or "default")}
                   for a in data.get("actions") or data.get("user_actions") or [] if isinstance(a, dict) and a.get("id")]
        content = _OUTPUT_VAR.sub(lambda m: f"[{m.group(1)}]", str(data.get("form_content") or "")).strip()
        form = cls(title=str(data.get("node_title") or "Human input"), content=content, inputs=inputs,
                   actions=actions)
        form.mode = form._mode()
        return form

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Form | None:
        try:
            inputs = [Input(name=str(i["name"]), type=str(i["type"]), options=[str(o) for o in i.get("options") or []],
                            default=str(i.get("default") or "")) for i in rec.get("inputs") or []]
            actions = [{"id": str(a["id"]), "title": str(a.get("title") or a["id"]), "style": str(a.get("style") or "")}
                       for a in rec.get("actions") or []]
            return cls(title=str(rec.get("title") or "Human input"), content=str(rec.get("content") or ""),
                       inputs=inputs, actions=actions, mode=str(rec.get("mode") or "typed"))
        except (KeyError, TypeError):
            return None

    def to_record(self) -> dict[str, Any]:
        return {
            "title": self.title, "content": self.content[:4000], "mode": self.mode,
            "inputs": [{"name": i.name, "type": i.type, "options": i.options, "default": i.default}
                       for i in self.inputs],
            "actions": self.actions,
        }

    # --- what kind of question -----------------------------------------------------------------

    @property
    def answerable(self) -> list[Input]:
        """The inputs a chat reply can fill (files cannot be sent through the form from the chat)."""
        return [i for i in self.inputs if not i.is_file]

    def _mode(self) -> str:
        if not self.actions:
            return "typed"
        if not self.inputs and len(self.actions) <= MAX_BUTTONS:
            return "actions"
        if len(self.inputs) == 1 and len(self.actions) == 1:
            only = self.inputs[0]
            if only.is_select and 0 < len(only.options) <= MAX_BUTTONS:
                return "choice"
            if only.type in TEXT_TYPES:
                return "field"
        return "typed"

    # --- the question ---------------------------------------------------------------------------

    def question_text(self, platform: str) -> str:
        lines = [f"📝 {platform} asks: {self.title}"]
        if self.content:
            lines.append(self.content[:3000])
        if self.mode == "actions":
            lines += [f"{n}. {a['title']}" for n, a in enumerate(self.actions, 1)]
            lines.append("Reply with a number or the name of your choice. / 请回复编号或选项名称。")
        elif self.mode == "choice":
            lines += [f"{n}. {o}" for n, o in enumerate(self.inputs[0].options, 1)]
            lines.append("Reply with a number or the option. / 请回复编号或选项。")
        elif self.mode == "field":
            lines.append(f"Reply with your answer ({self.inputs[0].name}). / 请回复你的答案。")
        else:
            lines.append("Fields / 字段:")
            for i in self.inputs:
                if i.is_file:
                    lines.append(f"- {i.name}: a file (cannot be sent from the chat)")
                elif i.is_select:
                    lines.append(f"- {i.name}: one of {' / '.join(i.options)}")
                else:
                    lines.append(f"- {i.name}: text" + (f" (default: {i.default[:80]})" if i.default else ""))
            if len(self.actions) > 1:
                lines.append("Actions / 操作: " + "  ".join(f"{n}. {a['title']}" for n, a in enumerate(self.actions, 1)))
            example = [f"{i.name}: …" for i in self.answerable[:2]]
            if len(self.actions) > 1:
                example.append("action: 1")
            lines.append("Reply with one line per field, e.g. / 请每行回复一个字段，例如：")
            lines.extend("  " + e for e in example)
        return "\n".join(lines)

    def question(self) -> Question:
        """The kit's question for a ``choice`` or ``field`` form (its one input's options, or a free answer)."""
        only = self.inputs[0] if self.inputs else None
        if self.mode == "choice" and only is not None:
            return Question(title=self.title, detail=self.content, kind="question", options=_options(only),
                            free_text=False)
        return Question(title=self.title, detail=self.content, kind="question")

    def request(self, interaction_id: str, platform: str, expires_at: int | None, caps: Any) -> dict[str, Any] | None:
        """The InteractionRequest, or None when the form can only be answered by typing. The
        ``actions`` buttons carry Dify's action ids; a ``choice`` or ``field`` form is asked as the
        kit asks a question (``opt-<i>`` buttons, or one text field named after the input)."""
        if self.mode == "actions":
            styles = set(getattr(caps, "action_styles", None) or ["default", "primary", "danger"])
            req: dict[str, Any] = {
                "kind": "confirmation" if len(self.actions) <= 3 else "choice",
                "actions": [{"id": a["id"], "label": a["title"][:512] or a["id"],
                             "style": _style(a.get("style", ""), styles)} for a in self.actions],
            }
        elif self.mode == "choice":
            req = ap.interaction_request(platform, self.question(), expires_at, caps)
        elif self.mode == "field":
            fld = self._field(caps)
            if fld is None:
                return None
            req = ap.interaction_request(platform, self.question(), expires_at, caps, field=fld)
        else:
            return None
        req.update({
            "interaction_id": interaction_id,
            "title": f"{platform}: {self.title}"[:1000],
            "description": (self.content or self.title)[:10000],
            "fallback_text": self.question_text(platform)[:20000],
        })
        if expires_at is not None:
            req["expires_at"] = int(expires_at)
        return req

    def _field(self, caps: Any) -> dict[str, Any] | None:
        """The one text field of a ``field`` form, of a type the platform renders (None: none)."""
        types = list(getattr(caps, "field_types", None) or [])
        if getattr(caps, "max_fields", None) == 0:
            return None
        only = self.inputs[0]
        kind = "textarea" if only.type == "paragraph" else "text"
        if types and kind not in types:
            kind = "text" if "text" in types else "textarea" if "textarea" in types else ""
        if not kind:
            return None
        fld: dict[str, Any] = {"id": only.name[:128], "label": only.name[:512], "type": kind, "required": True}
        if only.default:
            fld["default"] = only.default
        return fld

    # --- answers ---------------------------------------------------------------------------------

    def from_submission(self, submission: Any) -> tuple[str, dict[str, Any]] | None:
        """A click or a submitted field: ``(action id, inputs)``."""
        if self.mode == "actions":
            action = getattr(submission, "action_id", None)
            return (str(action), {}) if any(a["id"] == action for a in self.actions) else None
        if self.mode not in ("choice", "field"):
            return None
        only = self.inputs[0]
        d = ap.from_submission(submission, self.question(), field=only.name)
        if d is None or d.answer is None:
            return None
        return self.actions[0]["id"], {only.name: d.answer}

    def parse_reply(self, text: str) -> tuple[str, dict[str, Any]] | str | None:
        """A typed reply: ``(action id, inputs)``; a string saying what is missing when it looks like
        an answer that cannot be submitted; None when it is not an answer at all."""
        raw = (text or "").strip()
        if not raw:
            return None
        if self.mode == "actions":
            action = self._action(raw)
            return (action, {}) if action else None
        if self.mode == "choice":
            value = ap.pick(raw, _options(self.inputs[0]))
            return (self.actions[0]["id"], {self.inputs[0].name: value}) if value is not None else None
        if self.mode == "field":
            return self.actions[0]["id"], {self.inputs[0].name: raw}
        return self._parse_lines(raw)

    def _action(self, raw: str) -> str | None:
        return ap.pick(raw, [Option(value=a["id"], label=a["title"]) for a in self.actions])

    def _parse_lines(self, raw: str) -> tuple[str, dict[str, Any]] | str | None:
        names = {ap.norm(k): i.name for i in self.answerable for k in (i.name, i.name.replace("_", " "))}
        names.update({k: _ACTION for k in _ACTION_KEYS})
        values: dict[str, list[str]] = {}
        action_text: str | None = None
        loose: list[str] = []
        for name, lines in ap.read_lines(raw, names):
            if name == _ACTION:
                action_text = lines[0]
                loose += lines[1:]  # an action is one line
            elif name is None:
                loose += lines
            else:
                values[name] = lines
        texts = [i for i in self.answerable if not i.is_select]
        if not values and action_text is None:
            return None  # no field was named: this is not an answer to the form
        if loose and len(texts) == 1 and texts[0].name not in values:
            values[texts[0].name] = loose
        inputs: dict[str, Any] = {}
        problems: list[str] = []
        for i in self.answerable:
            got = "\n".join(values.get(i.name, [])).strip()
            if i.is_select:
                value = ap.pick(got, _options(i)) if got else None
                if value is None:
                    problems.append(f"{i.name} (one of {' / '.join(i.options)})")
                else:
                    inputs[i.name] = value
            elif got or i.default:
                inputs[i.name] = got or i.default
            else:
                problems.append(i.name)
        if len(self.actions) == 1:
            action = self.actions[0]["id"]
        else:
            action = self._action(action_text or "") if action_text else None
            if action is None:
                problems.append("action (" + " / ".join(f"{n}. {a['title']}" for n, a in enumerate(self.actions, 1)) + ")")
        if problems:
            return "missing or not understood: " + "; ".join(problems)
        return str(action), inputs


def _options(i: Input) -> list[Option]:
    return [Option(value=o, label=o) for o in i.options]


def _style(dify_style: str, styles: set[str]) -> str:
    # Dify button styles: primary | default | accent | ghost
    style = "primary" if dify_style in ("primary", "accent") else "default"
    return style if style in styles else "default"
