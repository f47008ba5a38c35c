"""A command-line reference page from an argparse parser: every subcommand, its usage and each option with its
value, default and help, so the page says what the parser accepts."""
from __future__ import annotations

import argparse
from typing import Iterator

from trainstack.image.docs import markdown_table


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name:
                    return choice.help or ""
    return ""


def _spellings(action: argparse.Action) -> str:
    """`-np`, `--num-processes` with the value's name; torchrun's underscore spellings (`--nproc_per_node`) after."""
    names = [name for name in action.option_strings if "_" not in name] or list(action.option_strings)
    aliases = [name for name in action.option_strings if name not in names]
    takes_value = action.nargs != 0
    value = f" {action.metavar or action.dest.upper()}" if takes_value else ""
    text = ", ".join(f"`{name}{value}`" for name in names)
    return text + (f" (also {', '.join(f'`{alias}`' for alias in aliases)})" if aliases else "")


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.required:
        return "required"
    if default in (None, argparse.SUPPRESS, False, True, "", []) or isinstance(default, tuple):
        return ""
    return f"`{default}`"


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _option_rows(actions: list[argparse.Action]) -> list[list[str]]:
    rows = []
    for action in actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if not action.option_strings:
            continue
        help_text = _one_line(action.help)
        if action.choices is not None:
            help_text += f" (one of {', '.join(f'`{choice}`' for choice in action.choices)})"
        rows.append([_spellings(action), _default(action), help_text])
    return rows


def _positionals(parser: argparse.ArgumentParser) -> list[list[str]]:
    return [[f"`{action.metavar or action.dest}`", _one_line(action.help)] for action in parser._actions
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction)]


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _parser_section(parser: argparse.ArgumentParser, level: str) -> Iterator[str]:
    yield "```text"
    yield _usage(parser)
    yield "```"
    yield ""
    if parser.description:
        yield _one_line(parser.description)
        yield ""
    positionals = _positionals(parser)
    if positionals:
        yield markdown_table(["argument", "what it is"], positionals)
        yield ""
    for group in parser._action_groups:
        rows = _option_rows(group._group_actions)
        if not rows:
            continue
        if group.title not in ("options", "optional arguments", "positional arguments"):
            yield f"{level} {group.title[:1].upper()}{group.title[1:]}"
            yield ""
            if group.description:
                yield _one_line(group.description)
                yield ""
        yield markdown_table(["option", "default", "what it does"], rows)
        yield ""


def cli_reference(parser: argparse.ArgumentParser, title: str, intro: str, anchor: str) -> str:
    """The page: the program's own usage, then one section per subcommand (`(anchor-NAME)=` targets)."""
    lines = [f"({anchor})=", f"# {title}", "", intro, ""]
    lines += _parser_section(parser, "##")
    if parser.epilog:
        lines += ["```text", parser.epilog.strip("\n"), "```", ""]
    for name, sub in _subcommands(parser).items():
        lines += [f"({anchor}-{name})=", f"## `{parser.prog} {name}`", ""]
        help_text = _help_of(parser, name)
        if help_text:
            lines += [f"*{_one_line(help_text)}*", ""]
        lines += _parser_section(sub, "###")
        for subname, subsub in _subcommands(sub).items():
            lines += [f"({anchor}-{name}-{subname})=", f"### `{parser.prog} {name} {subname}`", ""]
            lines += _parser_section(subsub, "####")
    return "\n".join(lines).rstrip() + "\n"
