"""What "allow for this session" covers (runner_kit.command_scope): which commands are simple, the
keys for commands, files and tools, and which remembered key covers which request."""

from __future__ import annotations

import os

import pytest

from runner_kit import command_scope as cs

SIMPLE = [
    "git status",
    "git   status   --short",
    "ls -la src",
    "npm test",
    "npm run build -- --watch",
    "pytest -q tests/kit",
    "echo 'a; b'",  # ; inside quotes is text
    'echo "a && b"',
    "echo 'a | b > c'",
    "grep -rn 'foo(' src",
    "echo '$(id)'",  # single quotes: no substitution
    "echo '`id`'",
    "echo \\;",  # an escaped ; is an argument
    "cat README.md",
    "python3 -m pytest -x",
    "python script.py --flag",
    "node app.js",
    "git log --format=%H -n 3",
    "make test",
    "cargo build --release",
    "touch made.txt",
    "rm -rf build",
    "git commit -m 'fix: the thing'",
    "ls ~/src",
    "echo $HOME",
    "echo sudo-like-word",
]

NOT_SIMPLE = [
    "git status; rm -f precious.txt; touch PWNED.txt",
    "cd src && ls",
    "cd / && rm -rf ~",
    "cd .. && touch PWNED.txt",
    "false || rm -rf ~",
    "ls | sh",
    "ls |& tee x",
    "sleep 1 &",
    "ls\nrm -rf ~",
    "echo $(touch PWNED.txt)",
    'echo "$(touch PWNED.txt)"',  # substitution happens inside double quotes
    "echo `touch PWNED.txt`",
    "diff <(ls a) <(ls b)",
    "tee >(sh)",
    "ls > out.txt",
    "ls >> out.txt",
    "ls 2>/dev/null",
    "cat < /etc/passwd",
    "cat <<EOF",
    "bash -c 'rm -rf ~'",
    "sh -c 'ls'",
    "zsh -c ls",
    "/bin/bash -lc 'git status'",
    "bash script.sh",
    "env rm -rf ~",
    "env FOO=1 ls",
    "sudo ls",
    "/usr/bin/sudo ls",
    "\\sudo ls",
    "'sudo' ls",
    "xargs rm",
    "eval 'rm -rf ~'",
    "exec rm -rf ~",
    "nohup ./server",
    "setsid ./server",
    "timeout 5 rm -rf ~",
    "nice -n 5 make",
    "command rm x",
    "builtin cd /",
    "time make",
    "find . -name '*.tmp' -exec rm {} \\;",
    "find . -execdir sh {} +",
    "python -c 'import os'",
    "python3.12 -c 'print(1)'",
    "node -e 'process.exit()'",
    "perl -e 'unlink q(x)'",
    "ruby -e 'exit'",
    "FOO=1 make",
    "PATH=/tmp:$PATH ls",
    "uv run sudo make",
    "npx env rm -rf ~",
    "ls # ; rm -rf ~",
    "echo 'unterminated",
    'echo "unterminated',
    "echo trailing\\",
    "(rm -rf ~)",
    "{ rm -rf ~; }",
    "if true; then rm -rf ~; fi",
    "$CMD --flag",
    "/usr/bin/su?o ls",  # a glob as the program
    "",
    "   ",
]


@pytest.mark.parametrize("command", SIMPLE)
def test_simple_commands(command):
    assert cs.is_simple(command)


@pytest.mark.parametrize("command", NOT_SIMPLE)
def test_compound_wrapped_or_unparsable_commands_are_not_simple(command):
    assert not cs.is_simple(command)


def test_the_table_is_large_enough():
    assert len(SIMPLE) + len(NOT_SIMPLE) >= 40


def test_command_keys_collapse_whitespace_but_keep_quoting():
    assert cs.command_key("  git   status  ") == cs.command_key("git status") == "cmd:git status"
    assert cs.command_key("rm '$HOME'") != cs.command_key("rm $HOME"), "a literal is not an expansion"
    assert cs.command_key("echo 'a b'") != cs.command_key("echo a b")
    assert cs.command_key("echo ';' x") != cs.command_key("echo ; x"), "a quoted ; is not the operator"
    # a compound command keeps its exact text: other spacing is another command
    assert cs.command_key("git status;  rm x") == "cmd:git status;  rm x"
    assert cs.command_key("git status; rm x") != cs.command_key("git status;  rm x")
    assert cs.command_key("") == "" and cs.command_key("ls " + "x" * cs.MAX_KEY) == ""


def test_only_the_one_known_wrapper_is_taken_off():
    assert cs.unwrap("/bin/bash -lc 'git status'") == "git status"
    assert cs.unwrap(["/bin/bash", "-lc", "git status; rm x"]) == "git status; rm x"
    assert cs.unwrap(["/usr/bin/zsh", "-c", "ls"]) == "ls"
    assert cs.unwrap(["rm", "-rf", "a b"]) == "rm -rf 'a b'"
    assert cs.unwrap("git status") == "git status"
    assert cs.unwrap("bash -lc 'ls' extra") == "bash -lc 'ls' extra"
    assert not cs.is_simple(cs.unwrap("/bin/bash -lc \"bash -c 'rm -rf ~'\""))


def test_prefix_rules_come_only_from_a_simple_command_that_starts_with_them():
    assert cs.prefix_key("git status", "git status --short") == "cmd-prefix:git status"
    assert cs.prefix_key(["git", "status"], "git status") == "cmd-prefix:git status"
    assert cs.prefix_key("git status", "git status; rm -f x") == "", "compound: the exact command only"
    assert cs.prefix_key("git push", "git status") == ""
    assert cs.prefix_key("sudo", "sudo ls") == ""
    assert cs.prefix_key("git stat", "git status") == "", "words, not characters"
    assert cs.prefix_key("x" * 60, "x" * 60) == "", "a rule that does not fit on a button"


@pytest.mark.parametrize(("kept", "asked", "covered"), [
    ("cmd:git status", "cmd:git status", True),
    ("cmd:git status", "cmd:git status --short", False),
    ("cmd-prefix:git status", "cmd:git status --short", True),
    ("cmd-prefix:git status", "cmd:git status", True),
    ("cmd-prefix:git status", "cmd:git status; rm -f precious.txt; touch PWNED.txt", False),
    ("cmd-prefix:git", "cmd:git status && rm -rf ~", False),
    ("cmd-prefix:git", "cmd:git status | sh", False),
    ("cmd-prefix:cd", "cmd:cd / && rm -rf ~", False),
    ("cmd:cd src && ls", "cmd:cd src && ls", True),
    ("cmd:cd src && ls", "cmd:cd / && rm -rf ~", False),
    ("cmd-prefix:npm test", "cmd:npm testx", False),
    ("cmd-prefix:rm '$HOME'", "cmd:rm $HOME", False),
    ("edit:src/app.py", "edit:src/app.py", True),
    ("edit:src/app.py", "edit:src/other.py", False),
    ("edit:src/app.py", "delete:src/app.py", False),
    ("cmd-prefix:git", "cmd-prefix:git", False),
    ("shell:git", "cmd:git status", False),  # an older version's scope
    ("edit", "edit:src/app.py", False),
    ("cmd-prefix:sudo", "cmd:sudo ls", False),
    ("", "cmd:ls", False),
])
def test_what_a_remembered_key_covers(kept, asked, covered):
    assert cs.covers(kept, asked) is covered


def test_file_keys_are_paths_inside_the_workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("x")
    os.symlink(tmp_path / "outside.txt", ws / "link.txt")
    os.symlink(tmp_path, ws / "up")
    assert cs.file_key("edit", ws / "src" / "app.py", ws) == "edit:src/app.py"
    assert cs.file_key("edit", "src/../src/app.py", ws) == "edit:src/app.py"
    assert cs.file_key("delete", "src/app.py", ws) == "delete:src/app.py"
    for outside in ("../outside.txt", str(tmp_path / "outside.txt"), "/etc/passwd", "link.txt", "up/outside.txt",
                    ws, "."):
        assert cs.file_key("edit", outside, ws) == "", outside
    assert cs.file_key("edit", "a.py", None) == ""
    assert cs.move_key("a.py", "src/b.py", ws) == 'move:["a.py", "src/b.py"]'
    assert cs.move_key("a.py", "../b.py", ws) == ""


def test_tool_keys_are_the_exact_call():
    a = cs.tool_key("WebFetch", {"url": "https://example.com", "prompt": "x"})
    assert a == cs.tool_key("WebFetch", {"prompt": "x", "url": "https://example.com"})
    assert a != cs.tool_key("WebFetch", {"url": "http://127.0.0.1:8080", "prompt": "x"})
    assert cs.covers(a, a) and cs.tool_key("WebFetch", {"b": "x" * cs.MAX_KEY}) == ""


def test_keys_of_other_shapes_are_not_keys():
    for key in ("shell:git", "edit", "WebFetch", "cmd:", "move:not json", 'move:["only one"]', "cmd-prefix:a; b", ""):
        assert not cs.valid(key), key
    assert cs.what(["shell:git"]) is None and cs.what([]) is None
