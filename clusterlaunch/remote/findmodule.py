"""Whether ``python -m NAME`` would find its module here, found without running any of its code.

Stdlib only, Python >= 3.8; bundled with the preflight's checks. The check
ran ``importlib.util.find_spec``, which imports the parent packages: their
``__init__.py`` ran inside the agent, whose stdout was the protocol channel (a
``print`` there garbled it), outside torchrun (``os.environ["LOCAL_RANK"]``
raised, ``sys.exit`` ended the agent) and kept what it imported (torch: 224
against 18 MB). Here each name is looked up as the import system would, by
``sys.meta_path``'s finders with the parent's ``submodule_search_locations``,
which loads nothing. A package's ``__init__`` may still change its own
``__path__`` as it runs (``pkgutil.extend_path``), so a module missing from
those locations is certain only below packages that run no code: namespace
packages, and ``__init__.py`` files holding no statement but a docstring.
Elsewhere torchrun decides.
"""

import os
import sys


class Undecided(Exception):
    """Only running a package's code (or an old finder) could tell."""


def module_problem(name):
    """Why ``python -m NAME`` certainly would not start here, or None (found, or undecided)."""
    try:
        return _missing_part(name)
    except Undecided:
        return None


def _missing_part(name):
    parts = name.split(".")
    path = None  # the top level: sys.path
    for depth in range(len(parts)):
        fullname = ".".join(parts[: depth + 1])
        spec = find_spec(fullname, path)
        if spec is None:
            below = "" if fullname == name else " (no %r)" % fullname
            return "no module %r for %s in %s%s; check the name, workdir: and python:" % (
                name,
                sys.executable,
                os.getcwd(),
                below,
            )
        if spec.submodule_search_locations is None:  # a plain module
            if fullname == name:
                return None
            if runs_code(spec):  # its code could still make itself a package
                raise Undecided(fullname)
            return "%r is not a package, so there is no module %r; check the name" % (
                fullname,
                name,
            )
        path = _locations(spec, fullname)
    if find_spec(name + ".__main__", path) is None:
        return "%r is a package without __main__.py; python -m cannot run it" % name
    return None


def _locations(spec, fullname):
    """Where the package ``fullname``'s submodules are, if no code of it can change that."""
    module = sys.modules.get(fullname)  # already imported (the stdlib's): its own __path__
    if module is not None:
        return module.__path__
    if runs_code(spec):
        raise Undecided(fullname)
    return spec.submodule_search_locations


def find_spec(fullname, path):
    """The spec the import system would find for ``fullname`` below ``path``, loading nothing."""
    module = sys.modules.get(fullname)
    if module is not None:
        if getattr(module, "__spec__", None) is None:  # __main__, or a module made by hand
            raise Undecided(fullname)
        return module.__spec__
    for finder in sys.meta_path:
        if not hasattr(finder, "find_spec"):  # a finder of the old kind (find_module)
            raise Undecided(fullname)
        try:
            spec = finder.find_spec(fullname, path)
        except Exception:  # a finder from a .pth file may raise anything: the job would see it
            raise Undecided(fullname) from None
        if spec is not None:
            return spec
    return None


def runs_code(spec):
    """Whether loading ``spec`` runs code: not for a namespace package, nor for a source
    file that holds only a docstring, comments or nothing."""
    if spec.loader is None or type(spec.loader).__name__ in ("NamespaceLoader", "_NamespaceLoader"):
        return False
    origin = spec.origin or ""
    if not origin.endswith(".py") or not spec.has_location:
        return True
    try:
        with open(origin, "rb") as handle:
            source = handle.read()
        body = compile(source, origin, "exec", 0x400, dont_inherit=True).body  # ast.PyCF_ONLY_AST
    except (OSError, SyntaxError, ValueError):
        return True  # unreadable, or an error the job will report itself
    return len(body) > 1 or (len(body) == 1 and not _is_docstring(body[0]))


def _is_docstring(statement):
    value = getattr(statement, "value", None)
    return type(statement).__name__ == "Expr" and isinstance(getattr(value, "value", None), str)
