"""What ``--torchrun-args`` may hold: torchrun's own options, minus those clusterlaunch sets.

Mistakes that would otherwise pass to every host: an option clusterlaunch
owns, in any spelling torchrun accepts (:func:`owned_torchrun_option`); a
word that is no option's value (torchrun would take it for the training
script and run it instead of SCRIPT, which would become its first argument);
an option without its value; ``-h``; a run id no file may be named; a value
torchrun refuses only once it has started, with a traceback on every host
(``--max-restarts -1``: ``AssertionError: max_restarts must be >= 0``).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Sequence

from clusterlaunch.core import limits
from clusterlaunch.core.errors import UsageError

# torchrun's long options (torch 2.13's get_args_parser, each also spelled with
# underscores but --role and --standalone); a unit test compares them with the installed torch.
TORCHRUN_OPTIONS = (
    *("--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id"),
    *("--rdzv-conf", "--standalone", "--max-restarts", "--monitor-interval", "--start-method"),
    *("--event-log-handler", "--role", "--module", "--no-python", "--run-path", "--log-dir"),
    *("--redirects", "--tee", "--local-ranks-filter", "--duplicate-stdout-filters"),
    *("--duplicate-stderr-filters", "--node-rank", "--master-addr", "--master-port"),
    *("--local-addr", "--logs-specs", "--numa-binding", "--signals-to-handle"),
    *("--shutdown-timeout", "--virtual-local-rank", "--help"),
)
# torchrun options clusterlaunch sets itself, or that would replace what it sets
# (--standalone: the rendezvous; --run-path: how SCRIPT runs); passing them would
# desynchronise the plan from what runs.
OWNED_TORCHRUN_OPTIONS = (
    *("--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port"),
    *("--standalone", "--log-dir", "--redirects", "--tee", "--local-ranks-filter"),
    *("--logs-specs", "--rdzv-backend", "--rdzv-endpoint", "--run-path"),
)
_OWNED_SHORT = {"-r": "--redirects", "-t": "--tee"}
_REPLACES = {
    "--standalone": "would replace the static rendezvous clusterlaunch sets",
    "--run-path": "would run SCRIPT in torchrun's own process, not as clusterlaunch runs it",
}
RUN_ID_OPTION = "--rdzv-id"
"""Set by clusterlaunch to the job id unless ``--torchrun-args`` gives one."""


# torchrun's options that take no value (torch 2.13's get_args_parser); every
# other option takes exactly one.
_FLAGS = ("--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank", "--help")
_SHORT_FLAGS = "mh"  # short options without a value, which may be bundled (-mr0)
# What argparse takes for a negative number, hence a value (Lib/argparse.py's matcher).
_NUMBER = re.compile(r"-[0-9]+|-[0-9]*\.[0-9]+")


def parse_torchrun_args(text: str) -> tuple[str, ...]:
    """Split ``--torchrun-args`` and refuse options clusterlaunch owns, and stray words."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--torchrun-args {text!r}: {exc}") from None
    for word in words:
        _refuse_spelling(word)
    _check_values(words)
    return tuple(words)


def _refuse_spelling(word: str) -> None:
    """Refuse an option clusterlaunch owns, ``-m``/``--no-python``, help, or a cut ``--rdzv-id``."""
    flag = _script_flag(word)
    if flag is not None:
        raise UsageError(
            f"--torchrun-args: {word} is clusterlaunch's own {flag}; write "
            f"clusterlaunch run {flag} HOSTS {'MODULE' if flag == '-m' else 'PROGRAM'} ..."
        )
    if word == "--":
        raise UsageError(
            "--torchrun-args: '--' would end torchrun's options, and clusterlaunch puts "
            "SCRIPT (or -m MODULE) after them itself; leave it out"
        )
    if _asks_help(word):  # torchrun would print it on every host and exit 0, starting nothing
        raise UsageError(
            f"--torchrun-args: {word} would print torchrun's help on every host and start "
            "nothing; read it with python -m torch.distributed.run --help"
        )
    name = word.split("=", 1)[0].replace("_", "-")
    if len(name) > len("--rdzv-") and name != RUN_ID_OPTION and RUN_ID_OPTION.startswith(name):
        raise UsageError(f"--torchrun-args: {word}: write {RUN_ID_OPTION} in full")
    owned = owned_torchrun_option(word)
    if owned is not None:
        what = _REPLACES.get(owned, "is set by clusterlaunch")
        raise UsageError(
            f"--torchrun-args: {word} {what} ({owned}); "
            "change the hosts file or clusterlaunch's own flags instead"
        )


def _check_values(words: Sequence[str]) -> None:
    """Every option has its value, every value follows its option, and a run id is a job id.

    A missing value at the end made torchrun take SCRIPT for it; before another
    option, torchrun failed on every host. ``--rdzv-id`` names torchrun's log
    folder: an empty one gave every node its own random id (the job hung), and
    ``a/b`` crashed torchrun.
    """
    waiting = None  # the option whose value comes next
    for word in words:
        if waiting is not None:
            if _is_option(word):
                raise UsageError(f"--torchrun-args: {waiting} needs a value before {word}")
            _check_value(waiting, word)
            waiting = None
        elif _is_option(word):
            name, equals, value = word.partition("=")
            if equals:
                if name.startswith("--") and not _takes_separate_value(name):
                    raise UsageError(f"--torchrun-args: {name} takes no value; write {name} alone")
                _check_value(name, value)
            elif _takes_separate_value(word):
                waiting = word
        else:
            raise UsageError(
                f"--torchrun-args: {word!r} is not an option or an option's value; torchrun "
                "would run it as the script (the script goes after HOSTS)"
            )
    if waiting is not None:
        raise UsageError(
            f"--torchrun-args: {waiting} needs a value (torchrun would take the script for it)"
        )


def _is_option(word: str) -> bool:
    """As argparse tells an option from a value: a negative number, or a word with a
    space in it (``--role '-a b'``), is a value."""
    plain = word.startswith("-") and len(word) > 1 and not _NUMBER.fullmatch(word)
    return plain and (" " not in word or _option_before_equals(word))


def _option_before_equals(word: str) -> bool:
    return "=" in word and " " not in word.split("=", 1)[0]


def _check_value(option: str, value: str) -> None:
    if option.replace("_", "-") == RUN_ID_OPTION:
        limits.job_id(f"--torchrun-args: {RUN_ID_OPTION}", value)
    name = torchrun_option(option)
    wanted = None if name is None else _VALUE_RULES.get(name)
    if wanted is not None and not wanted[1](value):
        raise UsageError(f"--torchrun-args: {option} {value!r}: {wanted[0]}")


def _whole(least: int) -> Callable[[str], bool]:
    def accepts(value: str) -> bool:  # torchrun's type=int: int(), so " 3" and "+3" too
        try:
            return int(value) >= least
        except ValueError:
            return False

    return accepts


def _positive_seconds(value: str) -> bool:
    try:
        number = float(value)
    except ValueError:
        return False
    return math.isfinite(number) and number > 0  # 0: an assertion; nan, inf: time.sleep fails


def _rdzv_conf(value: str) -> bool:
    """KEY=VALUE,... as torchrun's ``_parse_rendezvous_config`` reads it; the static
    rendezvous reads ``timeout`` with ``int()``."""
    pairs = [item.split("=", 1) for item in value.split(",")] if value.strip() else []
    if any(len(pair) < 2 or not pair[0].strip() or not pair[1].strip() for pair in pairs):
        return False
    return all(key.strip() != "timeout" or _whole(1)(number) for key, number in pairs)


# Values torchrun refuses only once it has started, on every host: (the fix, the check).
_VALUE_RULES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "--max-restarts": ("use a whole number, 0 or more", _whole(0)),
    "--shutdown-timeout": ("use a whole number of seconds, 0 or more", _whole(0)),
    "--monitor-interval": ("use a number of seconds above 0, e.g. 0.5", _positive_seconds),
    "--rdzv-conf": ("write KEY=VALUE[,KEY=VALUE...], e.g. timeout=900 (whole seconds)", _rdzv_conf),
}


def torchrun_option(word: str) -> str | None:
    """The long option of torchrun's that ``word`` names as its argparse reads it
    (``--max_r=1``: ``--max-restarts``), or ``None`` (none, or a prefix of several)."""
    name = word.split("=", 1)[0].replace("_", "-")
    if not name.startswith("--") or len(name) < 3:
        return None
    if name in TORCHRUN_OPTIONS:
        return name
    found = [option for option in TORCHRUN_OPTIONS if option.startswith(name)]
    return found[0] if len(found) == 1 else None


def _asks_help(word: str) -> bool:
    """``-h``, ``--help`` or a prefix argparse takes for it (``--he``), or ``-h`` bundled."""
    if word.startswith("--"):
        name = word.split("=", 1)[0]
        return len(name) > 2 and "--help".startswith(name)
    letters = word[1:] if word.startswith("-") else ""
    return "h" in letters and set(letters) <= set(_SHORT_FLAGS)


def _takes_separate_value(option: str) -> bool:
    if "=" in option:
        return False
    if not option.startswith("--"):  # -m (a flag), -mh (flags bundled); -r0 is refused as owned
        return len(option) == 2 and option[1] not in _SHORT_FLAGS
    name = option.replace("_", "-")
    return not any(flag.startswith(name) for flag in _FLAGS)


def _script_flag(word: str) -> str | None:
    """``-m``/``--no-python`` when ``word`` spells one: clusterlaunch's own flags now."""
    if word.startswith("--"):
        name = word.split("=", 1)[0].replace("_", "-")
        if len(name) > 4 and "--module".startswith(name):
            return "-m"
        return "--no-python" if len(name) > 4 and "--no-python".startswith(name) else None
    letters = word[1:] if word.startswith("-") else ""
    return "-m" if letters and "m" in letters and set(letters) <= set(_SHORT_FLAGS) else None


def sets_run_id(words: Sequence[str]) -> bool:
    """True when ``--torchrun-args`` gives torchrun's ``--rdzv-id`` (it wins over the job id)."""
    return any(word.split("=", 1)[0].replace("_", "-") == RUN_ID_OPTION for word in words)


def owned_torchrun_option(word: str) -> str | None:
    """The clusterlaunch-owned torchrun option ``word`` spells, or ``None``.

    Every spelling torchrun's argparse would take: ``--opt=value``, underscores
    for hyphens, any prefix (one shared with other options torchrun refuses
    anyway), and short options with their value attached or bundled after a
    flag (``-r0``, ``-t=3``, ``-mr0``).
    """
    if word.startswith("--"):
        name = word.split("=", 1)[0].replace("_", "-")
        if name == RUN_ID_OPTION:
            return None  # the user's own run id wins over the job id
        matches = [o for o in OWNED_TORCHRUN_OPTIONS if o.startswith(name)] if name[2:] else []
        if name in matches:
            return name
        return " or ".join(matches) or None
    for letter in word[1:] if word.startswith("-") else "":
        if "-" + letter in _OWNED_SHORT:
            return _OWNED_SHORT["-" + letter]
        if letter not in _SHORT_FLAGS:
            break  # the rest is a value (or an option torchrun refuses)
    return None


_TORCHRUN_MODULE = ["-m", "torch.distributed.run"]


def user_command(argv: Sequence[str]) -> list[str]:
    """What a torchrun command line runs: the script (or ``-m MODULE``, or the program of
    ``--no-python``) and its arguments, torchrun and its options left out; ``argv`` itself
    when it is not torchrun (``exec``). What identifies a job in ``ps``."""
    if list(argv[1:3]) == _TORCHRUN_MODULE:
        index = 3
    elif argv[:1] and argv[0].rsplit("/", 1)[-1] == "torchrun":
        index = 1
    else:
        return list(argv)
    module = False
    while index < len(argv) and _is_option(argv[index]):
        word = argv[index]
        if word == "--":  # the script follows, whatever it looks like
            index += 1
            break
        module = module or _script_flag(word) == "-m"
        index += 2 if _takes_separate_value(word) else 1
    rest = list(argv[index:])
    return ["-m", *rest] if module else rest
