"""What ``--torchrun-args`` may hold: torchrun's own options, minus those clusterlaunch sets.

Two mistakes would otherwise pass silently: an option clusterlaunch owns, in
any spelling torchrun accepts (:func:`owned_torchrun_option`), and a word
that is no option's value: torchrun would take it for the training script and
run it instead of SCRIPT, which would become its first argument.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from clusterlaunch.core.errors import UsageError

# torchrun's options that take no value (torch 2.13's get_args_parser); every
# other option takes exactly one.
_FLAGS = ("--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank", "--help")
_SHORT_FLAGS = "mh"  # short options without a value, which may be bundled (-mr0)
_NUMBER = re.compile(r"-[0-9.]+")

# torchrun options clusterlaunch sets itself; passing them would desynchronise
# the plan from what runs.
OWNED_TORCHRUN_OPTIONS = (
    "--nnodes",
    "--nproc-per-node",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--standalone",
    "--log-dir",
    "--redirects",
    "--tee",
    "--local-ranks-filter",
    "--logs-specs",
    "--rdzv-backend",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--rdzv-conf",
    "--rdzv-timeout",
    "--max-nodes",
    "--run-path",
)
_OWNED_SHORT = {"-r": "--redirects", "-t": "--tee"}


def parse_torchrun_args(text: str) -> tuple[str, ...]:
    """Split ``--torchrun-args`` and refuse options clusterlaunch owns, and stray words."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--torchrun-args {text!r}: {exc}") from None
    for word in words:
        owned = owned_torchrun_option(word)
        if owned is not None:
            raise UsageError(
                f"--torchrun-args: {word} is set by clusterlaunch ({owned}); "
                "change the hosts file or clusterlaunch's own flags instead"
            )
    stray = _stray_word(words)
    if stray is not None:
        raise UsageError(
            f"--torchrun-args: {stray!r} is not an option or an option's value; torchrun "
            "would run it as the script (the script goes after HOSTS)"
        )
    return tuple(words)


def _stray_word(words: Sequence[str]) -> str | None:
    expects_value = False
    for word in words:
        if expects_value:
            expects_value = False
        elif word.startswith("-") and len(word) > 1 and not _NUMBER.fullmatch(word):
            expects_value = _takes_separate_value(word)
        else:
            return word
    return None


def _takes_separate_value(option: str) -> bool:
    if "=" in option:
        return False
    if not option.startswith("--"):  # -m (a flag), -mh (flags bundled); -r0 is refused as owned
        return len(option) == 2 and option[1] not in _SHORT_FLAGS
    name = option.replace("_", "-")
    return not any(flag.startswith(name) for flag in _FLAGS)


def owned_torchrun_option(word: str) -> str | None:
    """The clusterlaunch-owned torchrun option ``word`` spells, or ``None``.

    Every spelling torchrun's argparse would take: ``--opt=value``, underscores
    for hyphens, any prefix (one shared with other options torchrun refuses
    anyway), and short options with their value attached or bundled after a
    flag (``-r0``, ``-t=3``, ``-mr0``).
    """
    if word.startswith("--"):
        name = word.split("=", 1)[0].replace("_", "-")
        matches = [o for o in OWNED_TORCHRUN_OPTIONS if o.startswith(name)] if name[2:] else []
        if name.startswith("--rdzv") or name in matches:
            return name
        return " or ".join(matches) or None
    for letter in word[1:] if word.startswith("-") else "":
        if "-" + letter in _OWNED_SHORT:
            return _OWNED_SHORT["-" + letter]
        if letter not in _SHORT_FLAGS:
            break  # the rest is a value (or an option torchrun refuses)
    return None
