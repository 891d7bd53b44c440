"""Where clusterlaunch's own words end and the words passed through untouched begin.

``run HOSTS SCRIPT ARGS...``: ARGS are the script's; ``exec HOSTS [OPTIONS] [--]
COMMAND...``: COMMAND is run as given. argparse cannot say this itself (its
handling of ``--`` and dash-words there differs between Python versions).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

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
    takes_value = _takes_value(parser, command)
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


def _takes_value(parser: argparse.ArgumentParser, command: str) -> set[str]:
    """The options of ``command`` that take a value (the next word is not an option)."""
    actions = _subparser(parser, command)._actions  # no public arity table
    return {option for action in actions for option in action.option_strings if action.nargs != 0}


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


def foreign_option(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """One line for the first option in ``words`` that the command does not know but another
    launcher does (``--nproc-per-node: use gpus: ...``), or ``None``.

    ``words`` are clusterlaunch's own (:func:`split_passthrough`'s first part);
    values of the command's options are skipped, so ``--env -x`` is no ``-x``.
    """
    command = next((w for w in words if not w.startswith("-")), None)
    if command is None or command not in _commands(parser):
        return None
    actions = _subparser(parser, command)._actions  # no public arity table
    known = {option for action in actions for option in action.option_strings}
    takes_value = {o for a in actions for o in a.option_strings if a.nargs != 0}
    rest = list(words[words.index(command) + 1 :])
    for index, word in enumerate(rest):
        if word == "--":
            return None
        if index and rest[index - 1] in takes_value:
            continue
        name = word.split("=", 1)[0]
        if word.startswith("-") and word != "-" and name not in known:
            from clusterlaunch.core import migrate  # only for the message: see cli/doctor.py

            hint = migrate.equivalent(name)
            if hint is not None:
                return hint
    return None


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


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
