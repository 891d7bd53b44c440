"""torch's version and CUDA runtime from its own ``version.py``, without importing torch.

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
