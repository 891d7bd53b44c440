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


def torchrun_problem(job):
    """Why this host's torchrun would refuse the options of ``job`` (its argv), or None.

    Refused, it printed its usage on every host and the job ended with 2: an option
    of a newer torch, a typo in ``--torchrun-args``.
    """
    options = torchrun_options()
    word = None if options is None else unknown_torchrun_option(job, options)
    if word is None:
        return None
    return (
        "torchrun here (torch %s) has no option %r; see python -m torch.distributed.run --help"
        % (
            torch_files()["torch"],
            word,
        )
    )


def torchrun_options():
    """``{option: takes a value}`` of the torchrun ``python -m torch.distributed.run`` would
    run, read from its source (``None`` where unknown).

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
    options = {"-h": False, "--help": False}  # argparse adds them
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flag = _is_flag({word.arg: word.value for word in node.keywords})
            for word in node.args:
                if isinstance(word, ast.Constant) and str(word.value).startswith("-"):
                    options[word.value] = not flag
    return options


def _is_flag(keywords):
    import ast

    action, nargs = keywords.get("action"), keywords.get("nargs")
    if isinstance(action, ast.Name) and action.id == "check_env":
        return True
    flags = ("store_true", "store_false", "store_const", "count", "help", "version")
    if isinstance(action, ast.Constant) and action.value in flags:
        return True
    return isinstance(nargs, ast.Constant) and nargs.value == 0


def unknown_torchrun_option(argv, options):
    """The first word of torchrun's options in ``argv`` (``PYTHON -m torch.distributed.run
    OPTIONS SCRIPT ...``) that this torchrun would refuse as unknown, or None."""
    words = argv[argv.index("torch.distributed.run") + 1 :]
    index = 0
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        word = words[index]
        name = _option_named(word, options)
        if name is None:
            return word
        attached = "=" in word or (not word.startswith("--") and len(word) > 2)
        index += 2 if options[name] and not attached else 1
    return None


def _option_named(word, options):
    """The option ``word`` names as argparse reads it: in full, a long one's unique prefix
    (``--max-res``), a short one with its value attached (``-r3``)."""
    name = word.split("=", 1)[0]
    if name in options:
        return name
    if name.startswith("--"):  # a prefix of one option's two spellings is that option
        found = {option.replace("_", "-"): option for option in options if option.startswith(name)}
        return next(iter(found.values())) if len(found) == 1 else None
    return word[:2] if word[:2] in options else None
