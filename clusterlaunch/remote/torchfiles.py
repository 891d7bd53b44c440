"""torch's version and CUDA runtime from its own ``version.py``, and torchrun's options
from its ``run.py``, without importing torch.

Shared by the preflight's checks (agent and probe) and ``doctor``; stdlib
only, Python >= 3.8, and no ``re``: the agent imports nothing it can do
without before the job starts. Reading the file takes ~0.5 ms where
``importlib.metadata`` took 28-43 ms of every ``run``'s start (its imports and
a search of every ``sys.path`` entry), and it describes the package ``import
torch`` would load, which a PYTHONPATH can make another than the installed
distribution.
"""

import os


def torch_files():
    """``{"torch", "cuda"}`` of the torch the job would import (``None`` where unknown)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")  # no parent package: nothing is imported
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        return {"torch": None, "cuda": None}
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return {"torch": None, "cuda": None}
    return {"torch": assigned(text, "__version__"), "cuda": assigned(text, "cuda")}


def assigned(text, name):
    """The string literal assigned to ``name`` at the start of a line (``None`` for ``None``).

    ``name = '1'`` and the annotated ``name: Optional[str] = '1'`` both count.
    """
    for line in text.splitlines():
        head, equals, value = line.partition("=")
        if not (equals and line.startswith(name) and head.split(":")[0].strip() == name):
            continue
        value = value.strip()
        end = value.find(value[:1], 1) if value[:1] in ("'", '"') else -1
        return value[1:end] if end > 0 else None
    return None


def torchrun_problem(job, version):
    """Why this host's torchrun (torch ``version``, as the checks found it) would refuse
    the options of ``job`` (its argv), or None.

    Refused, it printed its usage on every host and the job ended with 2: an option
    of a newer torch, a typo or an ambiguous abbreviation in ``--torchrun-args``.
    """
    arguments = torchrun_arguments()
    if arguments is None:
        return None
    said = argparse_refusal(arguments, job[job.index("torch.distributed.run") + 1 :])
    if said is None:
        return None
    return "torchrun here (torch %s) refuses its options: %s; see %s" % (
        version,
        said,
        "python -m torch.distributed.run --help",
    )


def torchrun_arguments():
    """``(names, is_flag, choices)`` of each option of the torchrun ``python -m
    torch.distributed.run`` would run, read from its source (``None`` where unknown).

    Without importing torch (1-2 s): ``ast`` reads ``run.py``'s ``add_argument`` calls,
    5 ms here for torch 2.13's 57 option strings. A flag is ``action=check_env`` (torch's
    own) or ``store_true``-like, or ``nargs=0``.
    """
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        with open(os.path.join(os.path.dirname(spec.origin), "distributed", "run.py")) as handle:
            tree = ast.parse(handle.read())
    except (AttributeError, ImportError, ValueError, TypeError, OSError, SyntaxError):
        return None  # no torch (the torch check says so), or a run.py unlike any known
    arguments = [(("-h", "--help"), True, None)]  # argparse adds them
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            names = [word.value for word in node.args if isinstance(word, ast.Constant)]
            if names and all(str(name).startswith("-") for name in names):
                keywords = {word.arg: word.value for word in node.keywords}
                arguments.append((tuple(names), _is_flag(keywords), _choices(keywords)))
    return arguments


def _is_flag(keywords):
    import ast

    action, nargs = keywords.get("action"), keywords.get("nargs")
    if isinstance(action, ast.Name) and action.id == "check_env":
        return True
    flags = ("store_true", "store_false", "store_const", "count", "help", "version")
    if isinstance(action, ast.Constant) and action.value in flags:
        return True
    return isinstance(nargs, ast.Constant) and nargs.value == 0


def _choices(keywords):
    import ast

    try:
        return list(ast.literal_eval(keywords["choices"])) if "choices" in keywords else None
    except (ValueError, TypeError, SyntaxError):
        return None  # computed (torch's --numa-binding): not checked


def argparse_refusal(arguments, words):
    """What this Python's argparse says against torchrun's ``words`` (its options, the
    script, the script's arguments), or None. This host's argparse, as torchrun's own:
    which prefix is ambiguous, which word is a value, changed across Python versions."""
    import argparse

    class Refused(Exception):
        pass

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise Refused(message)

    parser = Parser(prog="torchrun", add_help=False)
    for names, flag, choices in arguments:
        try:
            if flag:
                parser.add_argument(*names, action="store_true")
            else:
                parser.add_argument(*names, choices=choices)
        except (ValueError, argparse.ArgumentError):
            continue  # a name run.py gives twice (another branch): argparse took it once
    parser.add_argument("training_script")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    try:
        parser.parse_args(words)
    except Refused as exc:
        return str(exc)
    return None
