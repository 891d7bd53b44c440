"""Where clusterlaunch's own words end and the words passed through untouched begin.

``run HOSTS SCRIPT ARGS...``: ARGS are the script's; ``exec HOSTS [OPTIONS] [--]
COMMAND...``: COMMAND is run as given. argparse cannot say this itself (its
handling of ``--`` and dash-words there differs between Python versions).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence

# How many positionals come before the words passed through untouched.
_PASSTHROUGH_AFTER = {"run": 2, "exec": 1}


def split_passthrough(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Split ``argv`` into clusterlaunch's words and the words passed through untouched.

    ``run``: everything after SCRIPT is the script's, exactly as typed (argparse's
    handling of ``--`` and dash-words there differs between Python versions).
    ``exec``: options may follow HOSTS; the command starts after ``--`` or at
    the first word that is not an option.
    """
    words = list(argv)
    command_index = next((i for i, w in enumerate(words) if not w.startswith("-")), None)
    command = None if command_index is None else words[command_index]
    if command_index is None or command not in (*_PASSTHROUGH_AFTER, "check"):
        return words, []
    _, takes_value = _options(parser, command)
    if command == "check":
        return _positionals_last(words, command_index + 1, takes_value), []
    wanted = _PASSTHROUGH_AFTER[command]
    seen = 0
    index = command_index + 1
    options_done = False
    while index < len(words):
        word = words[index]
        if seen == wanted:
            if command == "run":
                break  # everything after SCRIPT is the script's
            if word == "--":  # exec HOSTS [OPTIONS] -- COMMAND
                return words[:index], words[index + 1 :]
            if not word.startswith("-") or word == "-":
                break  # exec HOSTS [OPTIONS] COMMAND
        index += 1
        if word == "--" and not options_done:
            options_done = True
        elif word.startswith("-") and word != "-" and not options_done:
            if word in takes_value:
                index += 1  # the option's value
        else:
            seen += 1
    return words[:index], words[index:]


def _options(parser: argparse.ArgumentParser, command: str) -> tuple[set[str], set[str]]:
    """``command``'s options (those of its own commands too: ``sandbox up``), and those of
    them that take a value (the next word is not an option): no public arity table."""
    actions = _actions(_subparser(parser, command))
    known = {option for action in actions for option in action.option_strings}
    return known, {o for a in actions for o in a.option_strings if a.nargs != 0}


def _positionals_last(words: list[str], start: int, takes_value: set[str]) -> list[str]:
    """``check HOSTS --env X=1 SCRIPT`` as ``check --env X=1 HOSTS SCRIPT``.

    argparse (3.11) gives the optional SCRIPT (``nargs='?'``) nothing once an
    option follows HOSTS, then refuses SCRIPT as an unrecognized argument; with
    the positionals together after the options it reads them as ``run`` does.
    A ``--`` and what follows it stay where they are.
    """
    options: list[str] = []
    positionals: list[str] = []
    index = start
    while index < len(words) and words[index] != "--":
        word = words[index]
        if word.startswith("-") and word != "-":
            options.append(word)
            if word in takes_value and index + 1 < len(words):
                index += 1
                options.append(words[index])
        else:
            positionals.append(word)
        index += 1
    return words[:start] + options + positionals + words[index:]


def check_script_argument(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """One line for a word after ``check``'s SCRIPT that is no option of check's, or None.

    A ``run`` command line copied into ``check`` keeps the script's arguments:
    ``-x`` was taken for mpirun's flag (``use --env ...``), ``--lr`` and
    ``data.txt`` for unrecognized arguments of check's own.
    """
    command = next((i for i, w in enumerate(words) if not w.startswith("-")), None)
    if command is None or words[command] != "check" or "--" in words:
        return None
    start = command + 1
    known, takes_value = _options(parser, "check")
    positionals = 0
    skip = False
    for word in words[start:]:
        if skip:
            skip = False
        elif word.startswith("-") and word != "-" and word.split("=", 1)[0] in known:
            skip = word in takes_value
        elif positionals == 2:
            return (
                f"{word}: check takes no arguments for SCRIPT (it starts nothing); "
                "leave out what follows SCRIPT, or use run"
            )
        elif not word.startswith("-") or word == "-":
            positionals += 1
    return None


def foreign_option(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """One line for the first option in ``words`` that the command does not know but another
    launcher does (``--nproc-per-node: use gpus: ...``), or ``None``.

    ``words`` are clusterlaunch's own (:func:`split_passthrough`'s first part);
    values of the command's options are skipped, so ``--env -x`` is no ``-x``.
    """
    for word in _unknown_options(parser, words):
        from clusterlaunch.core import migrate  # only for the message: see cli/doctor.py

        name = word.split("=", 1)[0]
        command = next(w for w in words if not w.startswith("-"))
        known, _ = _options(parser, command)
        hint = migrate.equivalent(word, known)
        if hint is not None:
            return hint if _fits(hint[len(name) :], known) else _not_here(name, command, hint)
    return None


def unknown_option(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """The first ``--option`` in ``words`` that the command does not take, or ``None``.

    argparse would name another word: it takes ``--bogus='x y'`` (a space after
    the ``=``) for a positional, and the value in ``ps --env A=1 HOSTS`` for
    HOSTS, then reports the real positionals as the unrecognized ones.
    """
    for word in _unknown_options(parser, words):
        name, equals, _ = word.partition("=")
        if word.startswith("--") and len(name) > 2 and (equals or " " not in word):
            return word
    return None


def _unknown_options(parser: argparse.ArgumentParser, words: Sequence[str]) -> Iterator[str]:
    """The words in ``words`` that look like options the command does not know, in order
    (values of its own options skipped; nothing after ``--``)."""
    command = next((w for w in words if not w.startswith("-")), None)
    if command is None or command not in _commands(parser):
        return
    known, takes_value = _options(parser, command)
    rest = list(words[words.index(command) + 1 :])
    for index, word in enumerate(rest):
        if word == "--":
            return
        if index and rest[index - 1] in takes_value:
            continue
        if word.startswith("-") and word != "-" and word.split("=", 1)[0] not in known:
            yield word


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """``parser``'s actions and those of its own commands (``sandbox up``): no public table."""
    nested = [_actions(sub) for sub in _commands(parser).values()]
    return [*parser._actions, *(action for actions in nested for action in actions)]


def _fits(hint: str, known: set[str]) -> bool:
    """Whether the command has an option the hint (without its flag) points to, if it names
    any: ``kill`` has no ``--env``."""
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", hint))
    return not named or bool(named & known)


def _not_here(name: str, command: str, hint: str) -> str:
    """The line for another launcher's option that this command has no equivalent of."""
    what = "no environment" if "--env" in hint else "no such option"
    return f"{name}: clusterlaunch {command} takes {what}; see clusterlaunch {command} --help"


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_parser(
    parser: argparse.ArgumentParser, words: Sequence[str]
) -> argparse.ArgumentParser:
    """The parser of the command ``words`` give (``sandbox up``'s own), else ``parser``:
    its errors name that command's help (``see clusterlaunch stacks --help``)."""
    for word in words:
        commands = _commands(parser)
        if not commands:
            break
        parser = commands.get(word, parser)
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


def dash_value(words: Sequence[str]) -> str | None:
    """An option given ``--`` as its value (``--env=--``), or None.

    argparse (3.11) turns that value into an empty list: a traceback for a
    string option, a silently ignored one for a number (``--timeout=--``).
    """
    given = next((w for w in words if w.startswith("-") and w.endswith("=--")), None)
    if given is None:
        return None
    option = given[: -len("=--")]
    return f"{option}: '--' is not a value; give {option} its value, or leave it out"
