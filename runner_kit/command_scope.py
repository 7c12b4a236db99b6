"""What "allow for this session" covers: scope keys for commands, file changes and other tools.

A permission question names what it asks for as one or more *scope keys*, and what "allow for
this session" would remember as scope keys too (:class:`runner_kit.approvals.Question`). Later
requests are allowed without asking only when every key they ask for is covered by a remembered
one (:func:`covers`):

- ``cmd:<command>`` — exactly this command. A *simple* command (see :func:`is_simple`) is written
  as its shell words as typed (quotes kept) joined by one space, so ``git  status`` and
  ``git status`` are the same key while ``rm '$HOME'`` and ``rm $HOME`` are not; any other command
  is the exact string (outer whitespace stripped). A command with a character that does not read as
  itself (zero-width, direction controls, a non-plain space) or a program name that is not ASCII
  is never simple: its button says "this exact command", never text that looks like another.
- ``cmd-prefix:<words>`` — a prefix rule the agent itself proposed (Claude Code's
  ``Bash(git status:*)``, Codex's exec-policy amendment): covers a command whose words start with
  these words, and only a simple command. A compound or wrapped command (``git status; rm -f x``,
  ``bash -c '…'``, ``sudo …``, ``git -c core.pager=sh …``, ``tar --to-command=…``, ``awk '…'``)
  is never covered by a rule, only by its own exact key.
- ``edit:<path>``, ``delete:<path>`` — one file, its path resolved (symlinks too) inside the
  workspace and written relative to it; ``move:["<from>", "<to>"]`` — one move. A path that leads
  outside the workspace gets no key: it can be allowed once, never remembered.
- ``tool:["<name>", <input>]`` — exactly this call of any other tool.

Anything else (the ``shell:git`` or ``edit`` an older version stored) is not a scope key and covers
nothing.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CMD, PREFIX, EDIT, DELETE, MOVE, TOOL = "cmd", "cmd-prefix", "edit", "delete", "move", "tool"
KINDS = (CMD, PREFIX, EDIT, DELETE, MOVE, TOOL)
FILE_KINDS = (EDIT, DELETE, MOVE)
LABEL_LIMIT = 80  # a button's label (Discord cuts at 80 characters)
MAX_KEY = 4000  # a longer command or tool input is allowed once, never remembered

# a program that runs another command, or a shell program given as text: never a simple command
WRAPPERS = frozenset({
    "env", "sudo", "doas", "su", "runuser", "pkexec", "xargs", "eval", "exec", "nohup", "setsid",
    "timeout", "nice", "ionice", "renice", "chrt", "taskset", "stdbuf", "unbuffer", "command", "builtin",
    "time", "source", ".", "trap", "chroot", "unshare", "nsenter", "flock", "watch", "strace", "ltrace",
    "script", "parallel", "busybox", "fakeroot", "firejail", "bwrap", "systemd-run", "ssh", "xvfb-run",
    "coproc", "caffeinate", "sg", "newgrp", "ssh-agent", "sshpass", "dbus-run-session",
})
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "rbash"})
RESERVED = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case",
                      "esac", "select", "function", "{", "}", "[[", "]]", "!", "in"})
# interpreter -> the options that make it run program text given on the command line
_EVAL = re.compile(r"^-[A-Za-z]*c[A-Za-z]*$")  # python -c, -Bc, -ic …
INTERPRETERS: dict[str, Any] = {
    "python": _EVAL, "pypy": _EVAL,
    "node": re.compile(r"^(-[A-Za-z]*[ep][A-Za-z]*|--eval(=.*)?|--print(=.*)?)$"),
    "nodejs": re.compile(r"^(-[A-Za-z]*[ep][A-Za-z]*|--eval(=.*)?|--print(=.*)?)$"),
    "bun": re.compile(r"^(-[A-Za-z]*e[A-Za-z]*|--eval(=.*)?|--print(=.*)?|-p)$"),
    "deno": re.compile(r"^(eval|-[A-Za-z]*e[A-Za-z]*|--eval(=.*)?)$"),
    "perl": re.compile(r"^-[A-Za-z0-9]*[eE].*$"),
    "ruby": re.compile(r"^-[A-Za-z]*e[A-Za-z]*$"),
    "php": re.compile(r"^-[A-Za-z]*r[A-Za-z]*$"),
    "lua": re.compile(r"^-[A-Za-z]*e[A-Za-z]*$"),
    "luajit": re.compile(r"^-[A-Za-z]*e[A-Za-z]*$"),
    "Rscript": re.compile(r"^(-e|--expr(=.*)?)$"),
    "osascript": re.compile(r"^-[A-Za-z]*e[A-Za-z]*$"),
    "tclsh": re.compile(r"^-c$"),
}
_ANY = re.compile(r"^.")  # an awk or sed program is its first argument: any argument may be one
for _awk in ("awk", "gawk", "mawk", "nawk", "busybox-awk", "sed", "gsed"):  # sed: ``1e cmd``, ``s/x/cmd/e``
    INTERPRETERS[_awk] = _ANY
INTERPRETERS.update({
    "R": re.compile(r"^(-e|--expr(=.*)?)$"), "julia": re.compile(r"^(-[A-Za-z]*[eE][A-Za-z]*|--eval|--print)$"),
    "gdb": re.compile(r"^(-?-ex|-?-eval-command(=.*)?|-?-iex|-x|-?-command(=.*)?)$"),
    "expect": re.compile(r"^-[A-Za-z]*c[A-Za-z]*$"), "ts-node": re.compile(r"^(-[ep]|--eval|--print)$"),
    "tsx": re.compile(r"^(-[ep]|--eval|--print)$"), "pwsh": re.compile(r"^-(c|command|ec|encodedcommand)$", re.I),
    "powershell": re.compile(r"^-(c|command|ec|encodedcommand)$", re.I), "guile": re.compile(r"^-c$"),
    "racket": re.compile(r"^-[A-Za-z]*e[A-Za-z]*$"), "elixir": re.compile(r"^-e$"), "erl": re.compile(r"^-eval$"),
    "sbcl": re.compile(r"^--eval$"), "socat": re.compile(r"(?i)(^|[!,])(exec|system):"),
    "vim": re.compile(r"^\+"), "vi": re.compile(r"^\+"), "nvim": re.compile(r"^\+"), "ex": re.compile(r"^\+"),
    "view": re.compile(r"^\+"),
})
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# options that make a program run a command named in its arguments (or, for git, set the config
# that names one: ``git -c core.pager=sh``, ``-c alias.x=!sh``, ``-c core.sshCommand=…``)
RUNS_COMMAND = {"find": FIND_EXEC, "fd": frozenset({"-x", "-X", "--exec", "--exec-batch"}),
                "fdfind": frozenset({"-x", "-X", "--exec", "--exec-batch"}), "rg": frozenset({"--pre"}),
                "git": frozenset({"-c", "--config-env", "--exec-path", "--upload-pack", "--receive-pack",
                                  "--open-files-in-pager", "-O", "--ext-diff"}),
                "tar": frozenset({"--to-command", "--checkpoint-action", "--use-compress-program", "-I",
                                  "--info-script", "--new-volume-script", "-F", "--rsh-command", "--rmt-command"}),
                "rsync": frozenset({"-e", "--rsh", "--rsync-path"}),
                "man": frozenset({"-P", "--pager", "-H", "--html"}),
                "zip": frozenset({"-TT", "--unzip-command"}), "scp": frozenset({"-S"}), "sftp": frozenset({"-S"}),
                "sort": frozenset({"--compress-program"}), "wget": frozenset({"--use-askpass"}),
                **dict.fromkeys(("vim", "vi", "nvim", "ex", "view"), frozenset({"-c", "--cmd", "-S"}))}
# git subcommands that run a command given in their arguments: (subcommand, its options or words)
GIT_RUNS = {"rebase": frozenset({"-x", "--exec"}), "clone": frozenset({"-u", "--upload-pack"}),
            "archive": frozenset({"--exec"}), "ls-remote": frozenset({"--upload-pack", "--exec"}),
            "difftool": frozenset({"-x", "--extcmd"}), "submodule": frozenset({"foreach"}),
            "bisect": frozenset({"run"}), "filter-branch": frozenset({"-"}), "grep": frozenset({"-O"})}
# a program that, named anywhere among the arguments, is likely run by the one before it
# (``uv run sudo …``, ``npx env …``); ``.``, ``time`` and ``command`` are too common as plain words
INNER = frozenset({"sudo", "doas", "su", "env", "xargs", "eval", "exec", "nohup", "setsid", "timeout", "nice",
                   "ionice", "chroot", "nsenter", "unshare", "pkexec", "runuser", "busybox", "builtin", "stdbuf"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_OPERATOR_CHARS = frozenset(";&|()<>")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SHELL_WRAPPER_FLAGS = ("-c", "-lc")


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word: ``raw`` as written (quotes kept), ``value`` with its quoting removed."""

    raw: str
    value: str
    operator: bool = False


@dataclass(frozen=True, slots=True)
class Parsed:
    """A command line as words, and whether anything in it makes it more than one plain command."""

    words: tuple[Word, ...]
    expands: bool  # $( … ), `…`, a comment, a newline, a control or an unseen character somewhere


def _unseen(command: str) -> bool:
    """Whether ``command`` holds a character a reader does not see as itself: zero-width and
    direction controls (U+200B, U+202E …), a space other than the plain one (U+00A0, U+3000),
    a line or paragraph separator. Shown in a button, the command would not read as what runs."""
    return not command.isascii() and any(_hidden(c) for c in command)


def _hidden(c: str) -> bool:
    cat = unicodedata.category(c)
    return cat in ("Cf", "Zl", "Zp", "Co", "Cn") or (c != " " and cat == "Zs")


def visible(text: str) -> str:
    """``text`` with each character a reader would not see as itself written as ``<U+202E>``: what a
    question shows is what runs, not text that reads as another command."""
    return text if text.isascii() else "".join(f"<U+{ord(c):04X}>" if _hidden(c) else c for c in text)


def parse(command: str) -> Parsed | None:
    """``command`` split into shell words and operators, quote-aware; None when it does not parse
    (an unterminated quote, a trailing backslash)."""
    words: list[Word] = []
    expands = bool(_CONTROL.search(command)) or "\n" in command or "\r" in command or _unseen(command)
    raw: list[str] = []
    value: list[str] = []
    in_word = False
    i, n = 0, len(command)

    def end_word() -> None:
        nonlocal in_word
        if in_word:
            words.append(Word("".join(raw), "".join(value)))
        raw.clear()
        value.clear()
        in_word = False

    while i < n:
        c = command[i]
        if c in " \t":
            end_word()
            i += 1
        elif c == "\n":
            end_word()
            words.append(Word("\n", "\n", operator=True))
            i += 1
        elif c in _OPERATOR_CHARS:
            end_word()
            j = i
            while j < n and command[j] in _OPERATOR_CHARS:
                j += 1
            words.append(Word(command[i:j], command[i:j], operator=True))
            i = j
        elif c == "#" and not in_word:
            expands = True  # a comment: what follows is not run, but is not what was shown either
            break
        elif c == "\\":
            if i + 1 >= n:
                return None
            raw.append(command[i:i + 2])
            value.append(command[i + 1])
            in_word = True
            i += 2
        elif c == "'":
            j = command.find("'", i + 1)
            if j < 0:
                return None
            raw.append(command[i:j + 1])
            value.append(command[i + 1:j])
            in_word = True
            i = j + 1
        elif c == '"':
            j = i + 1
            inner: list[str] = []
            while j < n and command[j] != '"':
                if command[j] == "\\" and j + 1 < n:
                    nxt = command[j + 1]
                    inner.append(nxt if nxt in '"\\$`\n' else command[j:j + 2])
                    j += 2
                    continue
                if command[j] == "`" or command.startswith("$(", j):
                    expands = True
                inner.append(command[j])
                j += 1
            if j >= n:
                return None
            raw.append(command[i:j + 1])
            value.append("".join(inner))
            in_word = True
            i = j + 1
        else:
            if c == "`" or command.startswith("$(", i):
                expands = True
            raw.append(c)
            value.append(c)
            in_word = True
            i += 1
    end_word()
    return Parsed(tuple(words), expands)


def is_simple(command: str) -> bool:
    """One plain program with its arguments: no ``;`` ``&&`` ``||`` ``|`` ``&``, newline, ``$( )``,
    backticks, redirection or process substitution, no ``FOO=1`` before it, and the program is not
    one that runs other commands (``bash -c``, ``env``, ``sudo``, ``xargs``, ``find … -exec``,
    ``python -c`` …). Anything that does not parse is not simple."""
    parsed = parse(command)
    if parsed is None or parsed.expands or not parsed.words:
        return False
    if any(w.operator for w in parsed.words):
        return False
    first = parsed.words[0]
    if _ASSIGNMENT.match(first.value) or any(ch in first.raw for ch in "$*?[]{}~"):
        return False
    name = os.path.basename(first.value)
    if not first.value.isascii():
        return False  # "gіt" (a Cyrillic і) would read as git on the button
    if name in WRAPPERS or name in RESERVED or name in SHELLS or not name:
        return False
    values = [w.value for w in parsed.words]
    for k, word in enumerate(values):
        prog = os.path.basename(word)
        rest = values[k + 1:]
        if k > 0 and (prog in INNER or (prog in SHELLS and rest and rest[0].startswith("-"))):
            return False  # a shell or a wrapper run by the program before it
        pattern = INTERPRETERS.get(_interpreter(prog))
        if pattern is not None and any(pattern.match(a) for a in rest):
            return False
        if any(_names(a, RUNS_COMMAND.get(prog, ())) for a in rest):
            return False
        if prog == "git" and any(_names(a, GIT_RUNS[sub]) for i, sub in enumerate(rest) if sub in GIT_RUNS
                                 for a in rest[i + 1:] or [""]):
            return False
    return True


def _names(arg: str, options: Iterable[str]) -> bool:
    """Whether ``arg`` gives one of ``options`` as the program reads it: ``--to-command=x``, an
    abbreviation ``--to-com=x`` (getopt and git take any unambiguous start), ``-Ix`` with its value
    attached, ``-ave x`` bundled after other letters; a plain word (``foreach``) as itself; ``-``
    stands for any argument."""
    if not options:
        return False
    name = arg.split("=", 1)[0]
    for opt in options:
        if opt == "-" or name == opt:
            return True
        if opt.startswith("--"):
            if name.startswith("--") and len(name) > 3 and opt.startswith(name):
                return True
        elif opt.startswith("-"):
            if arg.startswith(opt) or (len(opt) == 2 and re.match(r"^-[A-Za-z0-9]*" + re.escape(opt[1]), arg)):
                return True
    return False


def _interpreter(name: str) -> str:
    """``python3.12`` -> ``python``: the family an interpreter's name belongs to."""
    m = re.match(r"^(python|pypy)[0-9.]*$", name)
    return m.group(1) if m else name


def normalise(command: str) -> str:
    """The command as its key says it: a simple command's words joined by one space, else the
    exact string."""
    command = command.strip(" \t\n")  # what the shell itself skips; other characters are kept
    if is_simple(command):
        parsed = parse(command)
        assert parsed is not None
        return " ".join(w.raw for w in parsed.words)
    return command


def unwrap(command: str | Sequence[str]) -> str:
    """The command a wrapper-shell call runs: ``/bin/bash -lc '<cmd>'`` (string or argv, as Codex
    and codex-acp send every command) is judged as ``<cmd>``; another argv is joined as the shell
    would read it. Only that one known wrapper is taken off."""
    if isinstance(command, str):
        parsed = parse(command)
        if (parsed is not None and not parsed.expands and len(parsed.words) == 3
                and not any(w.operator for w in parsed.words)):
            argv = [w.value for w in parsed.words]
            if os.path.basename(argv[0]) in SHELLS and argv[1] in _SHELL_WRAPPER_FLAGS:
                return argv[2]
        return command
    argv = [str(a) for a in command]
    if len(argv) == 3 and os.path.basename(argv[0]) in SHELLS and argv[1] in _SHELL_WRAPPER_FLAGS:
        return argv[2]
    import shlex

    return shlex.join(argv)


# --- keys --------------------------------------------------------------------------------------


def command_key(command: str) -> str:
    """The key a request to run ``command`` asks for ("" when it cannot be named)."""
    text = normalise(command)
    return f"{CMD}:{text}" if text and len(text) <= MAX_KEY else ""


def prefix_key(prefix: str | Sequence[str], command: str) -> str:
    """The rule key for ``prefix`` (the agent's proposal, as a string of shell words or as argv)
    when it may stand for "allow for this session" on ``command``: ``command`` is simple, starts
    with these words, and the rule fits on a button; else ""."""
    if not isinstance(prefix, str):
        import shlex

        prefix = shlex.join(str(p) for p in prefix)
    prefix = prefix.strip()
    if not prefix or not is_simple(prefix) or not is_simple(command):
        return ""
    want = [w.raw for w in _words(prefix)]
    have = [w.raw for w in _words(command)]
    if have[: len(want)] != want:
        return ""
    text = " ".join(want)
    key = f"{PREFIX}:{text}"
    return key if len(f"Allow {what([key])} for this session") <= LABEL_LIMIT else ""


def file_key(kind: str, path: str | os.PathLike[str], workspace: Path | str | None) -> str:
    """``edit:``/``delete:`` and the path inside ``workspace``; "" when it leads outside (an
    absolute path elsewhere, ``..``, a symlink out) or cannot be resolved."""
    rel = _inside(path, workspace)
    if kind not in (EDIT, DELETE) or rel is None:
        return ""
    return f"{kind}:{rel}"


def move_key(source: str | os.PathLike[str], target: str | os.PathLike[str], workspace: Path | str | None) -> str:
    """``move:["<from>", "<to>"]`` when both lie inside ``workspace``; else ""."""
    a, b = _inside(source, workspace), _inside(target, workspace)
    if a is None or b is None:
        return ""
    return f"{MOVE}:" + json.dumps([a, b], ensure_ascii=False)


def tool_key(name: str, payload: Any) -> str:
    """Exactly this call of tool ``name`` with this input ("" when too large to keep)."""
    try:
        text = json.dumps([str(name), payload], ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return ""
    return f"{TOOL}:{text}" if name and len(text) <= MAX_KEY else ""


def _inside(path: str | os.PathLike[str], workspace: Path | str | None) -> str | None:
    if workspace is None or not str(path):
        return None
    try:
        root = Path(os.path.realpath(workspace))
        target = Path(path)
        if not target.is_absolute():
            target = root / target
        real = Path(os.path.realpath(target))
        rel = real.relative_to(root)
    except (OSError, ValueError):
        return None
    text = rel.as_posix()
    if text in ("", ".") or _CONTROL.search(text) or "\n" in text or len(text) > MAX_KEY:
        return None
    return text


def _words(command: str) -> tuple[Word, ...]:
    parsed = parse(command)
    return parsed.words if parsed is not None else ()


def split(key: str) -> tuple[str, str] | None:
    """``(kind, body)`` of a well-formed key; None for anything else (an older version's scope)."""
    kind, sep, body = key.partition(":") if isinstance(key, str) else ("", "", "")
    if not sep or kind not in KINDS or not body:
        return None
    if kind == MOVE:
        try:
            pair = json.loads(body)
        except ValueError:
            return None
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
            return None
    if kind == PREFIX and not is_simple(body):
        return None
    return kind, body


def valid(key: str) -> bool:
    return split(key) is not None


def covers(remembered: str, asked: str) -> bool:
    """Whether the remembered key ``remembered`` allows the request key ``asked``: the same key,
    or a prefix rule and a simple command that starts with its words."""
    have, want = split(remembered), split(asked)
    if have is None or want is None or want[0] == PREFIX:  # a rule is never what a request asks for
        return False
    if have == want:
        return True
    if have[0] != PREFIX or want[0] != CMD or not is_simple(want[1]):
        return False
    rule = [w.raw for w in _words(have[1])]
    words = [w.raw for w in _words(want[1])]
    return bool(rule) and words[: len(rule)] == rule


# --- what the chat is told ---------------------------------------------------------------------


# what "allow for this session" covers, in words, per language (en, zh)
_SAID: dict[str, dict[str, str]] = {
    "en": {"cmd": "this exact command", "prefix": "commands starting with `{b}`", "tool": "this exact request",
           "files": "these file changes ({x})", "sep": ", ", "other": "these requests",
           "move": "moving {a} to {b}", "edit": "editing {p}", "delete": "deleting {p}",
           "none": "Allow for this session", "label": "Allow {what} for this session",
           "short-cmd": "Allow this exact command for this session",
           "short-prefix": "Allow commands starting with the words asked for this session",
           "short-files": "Allow these file changes for this session",
           "short-file": "Allow this file change for this session",
           "short-other": "Allow this exact request for this session"},
    "zh": {"cmd": "这条命令（原样）", "prefix": "以 `{b}` 开头的命令", "tool": "这个请求（原样）",
           "files": "这些文件改动（{x}）", "sep": "、", "other": "这些请求",
           "move": "把 {a} 移到 {b}", "edit": "编辑 {p}", "delete": "删除 {p}",
           "none": "本次会话内允许", "label": "本次会话内允许：{what}",
           "short-cmd": "本次会话内允许这条命令（原样）",
           "short-prefix": "本次会话内允许以所问的词开头的命令",
           "short-files": "本次会话内允许这些文件改动",
           "short-file": "本次会话内允许这项文件改动",
           "short-other": "本次会话内允许这个请求（原样）"},
}


def what(keys: Iterable[str], language: str = "en") -> str | None:
    """What "allow for this session" on these keys covers, in words ("`git status`", "commands
    starting with `git status`", "editing src/app.py"; ``language`` "zh": in Chinese); None when
    there is nothing to remember."""
    said = _SAID.get(language, _SAID["en"])
    keys = list(keys)
    parts = [split(k) for k in keys]
    if not parts or any(p is None for p in parts):
        return None
    found = [p for p in parts if p is not None]
    if len(found) == 1:
        kind, body = found[0]
        if kind == CMD:
            return f"`{body}`" if is_simple(body) and "`" not in body else said["cmd"]
        if kind == PREFIX:
            return said["prefix"].format(b=body)
        if kind == TOOL:
            return said["tool"]
        return _file_words(kind, body, said)
    if all(k in FILE_KINDS for k, _ in found):
        return said["files"].format(x=said["sep"].join(_file_words(k, b, said) for k, b in found))
    return said["other"]


def _file_words(kind: str, body: str, said: dict[str, str]) -> str:
    if kind == MOVE:
        a, b = json.loads(body)
        return said["move"].format(a=visible(a), b=visible(b))
    return said["edit" if kind == EDIT else "delete"].format(p=visible(body))


def label(*keys: str, language: str = "en") -> str:
    """The "allow for this session" button for these keys, short enough for every platform."""
    said = _SAID.get(language, _SAID["en"])
    covered = what(keys, language)
    if covered is None:
        return said["none"]
    text = said["label"].format(what=covered)
    if len(text) <= LABEL_LIMIT:
        return text
    kinds = {k for k, _ in (split(k) or ("", "") for k in keys)}
    if kinds == {CMD}:
        return said["short-cmd"]
    if kinds == {PREFIX}:
        return said["short-prefix"]
    if kinds <= set(FILE_KINDS):
        return said["short-files"] if len(keys) > 1 else said["short-file"]
    return said["short-other"]
