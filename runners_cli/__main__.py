"""The ``runners`` command: list, build and chat with the runner plugins in this repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import plugins


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runners", description="LangBot runner plugins: list them, package them, chat with them."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_list = sub.add_parser("list", help="list the plugins, their runner ids, versions and capabilities")
    p_list.add_argument("--json", action="store_true", help="machine-readable output")

    p_build = sub.add_parser(
        "build",
        help="package plugins as .lbpkg files with the shared runner_kit vendored",
        description="Stage each plugin with runner_kit copied in (.stage/<dir>), validate it the way the SDK "
        "and LangBot will, and package it with the SDK's lbp build.",
    )
    p_build.add_argument("plugins", nargs="*", metavar="PLUGIN", help="directory or plugin name (default: all)")
    p_build.add_argument("--out", default="dist", metavar="DIR", help="output directory (default: dist)")
    p_build.add_argument(
        "--stage", default=None, metavar="DIR", help="staging root (default: .stage under the repository root)"
    )

    p_chat = sub.add_parser(
        "chat",
        help="talk to a plugin's runner through the local host",
        description="Run a plugin's runner in-process against a local LangBot host. The answer streams to "
        "stdout; tool calls, usage, state changes and errors go to stderr. Without -m, reads one message "
        "per line from stdin until EOF or /exit.",
    )
    p_chat.add_argument("plugin", metavar="PLUGIN", help="directory or plugin name, e.g. dify-agent")
    p_chat.add_argument("--config", metavar="FILE", help="runner config as YAML or JSON (a mapping of keys)")
    p_chat.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
        help="set one config key (a string; the runner coerces it); repeatable, overrides --config",
    )
    p_chat.add_argument("-m", "--message", metavar="TEXT", help="send one message and exit")
    p_chat.add_argument(
        "--follow-up", action="append", default=[], metavar="TEXT",
        help="with -m: a message sent while the run answers (runners that take follow-ups); repeatable",
    )
    p_chat.add_argument(
        "--state", metavar="FILE", default=None,
        help="SQLite file for persistent runner state (default: .runners/chat-state.sqlite)",
    )
    p_chat.add_argument("--conversation", default="cli", metavar="ID", help='conversation id (default: "cli")')
    p_chat.add_argument("--user", default=None, metavar="ID", help="the sender's user id")
    p_chat.add_argument("-v", "--verbose", action="store_true", help="show the runner's log records")
    llm = p_chat.add_argument_group(
        "local model (local-agent only)",
        "local-agent runs on LangBot's own models and tools: the local host serves its model from this "
        "OpenAI-compatible Chat Completions endpoint (model id local-llm) and offers two demo tools, "
        "current_time and calculate. Other plugins accept and ignore these flags.",
    )
    llm.add_argument("--llm-base-url", metavar="URL", help="e.g. http://127.0.0.1:11434/v1 (default: $OPENAI_BASE_URL)")
    llm.add_argument("--llm-api-key", metavar="KEY", help="the endpoint's API key (default: $OPENAI_API_KEY)")
    llm.add_argument("--llm-model", metavar="NAME", help="the model name the endpoint serves (default: $OPENAI_MODEL)")
    p_new = sub.add_parser(
        "new",
        help="start a new plugin: its directory, fake, contract case, tests and benchmark entry",
        description="Create the plugin directory in the shared shape, and under the repository its fake "
        "platform (tests/fakes/), the fake's self-test, its contract case (tests/contract/case_<package>.py), "
        "its test module (tests/plugins/) and its benchmark entry (bench/entries/). Each fails with "
        "\"not written yet\" until it is filled in; the next steps are printed. Never overwrites a file.",
    )
    p_new.add_argument("directory", help="directory name, e.g. coze-agent")
    p_new.add_argument("name", help="plugin name, e.g. CozeAgent")
    p_new.add_argument("--platform", required=True, help='display name of the platform, e.g. "Coze"')
    p_new.add_argument("--root", default=None, metavar="DIR", help="repository root (default: this checkout)")
    return parser


def _find(name: str) -> plugins.PluginInfo:
    try:
        return plugins.find(name)
    except KeyError as exc:
        raise SystemExit(f"runners: {exc.args[0]}") from None


def cmd_list(args: argparse.Namespace) -> int:
    from .listing import print_list

    print_list(plugins.discover(), sys.stdout, as_json=args.json)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from .build import STAGE_ROOT, build_all

    infos = [_find(n) for n in args.plugins] if args.plugins else plugins.discover()
    if not infos:
        print("runners build: no plugins found", file=sys.stderr)
        return 1
    built, failures = build_all(
        infos,
        Path(args.out),
        stage_root=Path(args.stage) if args.stage else STAGE_ROOT,
        on_built=lambda info, path: print(path, flush=True),
    )
    for failure in failures:
        print(failure.report(), file=sys.stderr)
    if failures:
        print(f"runners build: {len(failures)} of {len(infos)} plugin(s) failed", file=sys.stderr)
        return 1
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from .chat import (
        DEFAULT_STATE,
        LOCAL_AGENT,
        ChatError,
        apply_sets,
        chat,
        llm_settings,
        load_config_file,
        local_agent_config,
    )

    info = _find(args.plugin)
    llm = None
    try:
        config = load_config_file(args.config) if args.config else {}
        config = apply_sets(config, args.sets)
        if info.dirname == LOCAL_AGENT:
            llm = llm_settings(args.llm_base_url, args.llm_api_key, args.llm_model)
            config = local_agent_config(config)
    except ChatError as exc:
        print(f"runners chat: {exc}", file=sys.stderr)
        return 2
    if args.follow_up and args.message is None:
        print("runners chat: --follow-up needs -m (in the interactive chat, type while the agent works)",
              file=sys.stderr)
        return 2
    state = Path(args.state) if args.state else Path.cwd() / DEFAULT_STATE
    return chat(
        info,
        config=config,
        message=args.message,
        state_path=state,
        conversation=args.conversation,
        user=args.user,
        verbose=args.verbose,
        follow_ups=args.follow_up,
        llm=llm,
    )


def cmd_new(args: argparse.Namespace) -> int:
    from .scaffold import scaffold

    try:
        made = scaffold(args.directory, args.name, args.platform, root=Path(args.root) if args.root else None)
    except (ValueError, FileExistsError) as exc:
        print(f"runners new: {exc}", file=sys.stderr)
        return 2
    print(made.report())
    return 0


COMMANDS = {"list": cmd_list, "build": cmd_build, "chat": cmd_chat, "new": cmd_new}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
