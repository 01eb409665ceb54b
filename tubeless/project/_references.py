"""Resolving ``package.module:attribute`` references from a project file.

The project's ``python_path`` folders (relative to the file) are searched first, then
``sys.path``. Modules are never reloaded: a module already imported from another file than the
one the project's folders provide is an error naming both. Schema references may name standard
types.

Callables come from an allowlist of places: a callable is accepted only when every module it
comes from (:func:`_origins`: a function's ``__module__``, a built-in's ``__self__``, a method
descriptor's ``__objclass__``, a class's own module, what a ``functools.partial`` or a wrapper
with ``__wrapped__`` calls) is the project's own code or an installed package outside the
standard library, or a standard module the project lists in ``allow_modules``. A callable whose
origin cannot be told is refused. So ``helpers:Popen`` (after ``from subprocess import
Popen``) and ``helpers:run`` (``run = eval.__call__``) are refused like ``subprocess:Popen``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import traceback
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from tubeless.project._issues import did_you_mean

__all__ = ["ReferenceProblem", "Resolver"]

Kind = Literal["callable", "schema", "tool", "object"]


class ReferenceProblem(Exception):
    """A reference that cannot be used; the message says why and what to change.

    ``original`` is what importing the module raised, if that is the problem; ``repeated`` is
    true for a later reference to a module whose import already failed (said once).
    """

    def __init__(
        self, message: str, *, original: BaseException | None = None, repeated: bool = False
    ) -> None:
        super().__init__(message)
        self.original = original
        self.repeated = repeated


_FUNCTIONS = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
)
#: Implementation modules that stand for a public standard-library module (``_functools``
#: stands for ``functools`` by the underscore rule in :func:`_public`).
_ALIASES = {"posix": "os", "nt": "os", "posixpath": "os", "ntpath": "os", "_io": "io"}
#: How many wrappers (partials, bound methods, method-wrappers) are looked through.
_MAX_WRAPPING = 16
_DESCRIPTORS = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
)


def _stdlib(module_name: str) -> bool:
    top = module_name.partition(".")[0]
    return top in sys.stdlib_module_names or top == "builtins"


def _public(module_name: str) -> str:
    """The public standard module an implementation module stands for (``posix`` → ``os``)."""
    if module_name in _ALIASES:
        return _ALIASES[module_name]
    top, dot, rest = module_name.partition(".")
    if top.startswith("_") and top[1:] in sys.stdlib_module_names:
        return top[1:] + dot + rest
    return module_name


def _module_of(value: Any) -> list[str] | None:
    name = getattr(value, "__module__", None)
    return [name] if isinstance(name, str) and name else None


def _origins(value: Any, depth: int = 0) -> list[str] | None:
    """Every module a callable comes from, or None when that cannot be told."""
    if depth > _MAX_WRAPPING:
        return None
    if isinstance(value, types.ModuleType):
        return [value.__name__]
    if isinstance(value, type):
        return _module_of(value)
    if isinstance(value, types.FunctionType):
        return _module_of(value)
    if isinstance(value, types.MethodType):
        return _origins(value.__func__, depth + 1)
    if isinstance(value, types.BuiltinFunctionType):  # built-in functions and bound C methods
        owner = value.__self__
        if owner is None or isinstance(owner, types.ModuleType):
            found = _module_of(value) or ([owner.__name__] if owner is not None else None)
            return found
        inner = _origins(owner if isinstance(owner, type) else type(owner), depth + 1)
        return None if inner is None else [*inner, *(_module_of(value) or [])]
    if isinstance(value, types.MethodWrapperType):  # x.__call__ and other slot wrappers
        return _origins(value.__self__, depth + 1)
    if isinstance(value, _DESCRIPTORS):  # str.join, object.__init__, dict.fromkeys's descriptor
        return _module_of(value.__objclass__)
    if isinstance(value, functools.partial):
        return _origins(value.func, depth + 1)
    found = _module_of(type(value))  # any other callable object: its class says where from
    wrapped = getattr(value, "__wrapped__", None)
    if found is not None and _stdlib(found[0]) and wrapped is not None:
        return _origins(wrapped, depth + 1)  # functools.lru_cache and similar wrappers
    return found


class Resolver:
    """Resolves references for one project file.

    Args:
        base_dir: The folder of the project file.
        python_path: Folders relative to ``base_dir``, searched first.
        allow_modules: Standard-library modules whose callables may be named.
    """

    def __init__(
        self, base_dir: Path, python_path: Sequence[str], allow_modules: Sequence[str]
    ) -> None:
        self.base_dir = base_dir
        self.folders = [(base_dir / folder).resolve() for folder in python_path]
        self.allow_modules = set(allow_modules)
        self._cache: dict[str, Any] = {}
        self._failed: dict[str, ReferenceProblem] = {}

    def folder_problems(self) -> list[tuple[int, str]]:
        """``(index in python_path, message)`` for each folder that is missing, and for each
        file in one that shadows a standard-library module (imports of that module would get
        the project's file)."""
        found: list[tuple[int, str]] = []
        for index, folder in enumerate(self.folders):
            if not folder.is_dir():
                what = "is not a folder" if folder.exists() else "does not exist"
                found.append((index, f"python_path folder {self._shown(folder)} {what}"))
                continue
            for entry in sorted(folder.iterdir()):
                name = entry.stem if entry.suffix == ".py" else entry.name
                shadows = (entry.suffix == ".py" and entry.is_file()) or (
                    entry.is_dir() and (entry / "__init__.py").is_file()
                )
                if shadows and name in sys.stdlib_module_names:
                    found.append(
                        (
                            index,
                            f"{self._shown(entry)} shadows the standard library "
                            f"module {name!r} (imports of {name!r} get this file); "
                            "rename it",
                        )
                    )
        return found

    def _shown(self, path: Path) -> str:
        """``path`` relative to the project's folder when inside it (as the user wrote it)."""
        try:
            return path.relative_to(self.base_dir.resolve()).as_posix()
        except ValueError:
            return str(path)

    def activate(self) -> None:
        """Put the project's folders at the front of ``sys.path`` (once each)."""
        for folder in reversed(self.folders):
            text = str(folder)
            while text in sys.path:
                sys.path.remove(text)
            sys.path.insert(0, text)

    def resolve(self, reference: str, kind: Kind) -> Any:
        """The object named by ``reference``; raises :class:`ReferenceProblem`."""
        module_name, _, attribute = reference.partition(":")
        if kind != "schema" and _stdlib(module_name) and not self._allowed(module_name):
            raise ReferenceProblem(
                f"{reference!r} names the standard library module {module_name!r}; add it to "
                "allow_modules if the project really needs it"
            )
        module = self._module(module_name)
        value: Any = module
        for part in attribute.split("."):
            try:
                value = getattr(value, part)
            except AttributeError:
                names = [n for n in dir(value) if not n.startswith("_") or part.startswith("_")]
                hint = did_you_mean(part, names)
                raise ReferenceProblem(
                    f"module {module_name!r} has no attribute {attribute!r}"
                    + (f"; {hint}" if hint else "")
                ) from None
            if kind != "schema":
                self._refuse_stdlib(reference, value)
        if kind == "callable" and not callable(value):
            kind_name = type(value).__name__
            article = "an" if kind_name[:1].lower() in "aeiou" else "a"
            raise ReferenceProblem(f"{reference!r} is {article} {kind_name}, not a callable")
        if kind == "callable":
            self._check_callable(reference, value)
        return value

    def _check_callable(self, reference: str, value: Any) -> None:
        """Accept a callable only from the project, an installed package or an allowed module."""
        origins = _origins(value)
        if not origins:
            raise ReferenceProblem(
                f"cannot tell which module {reference!r} comes from, so it is refused; name a "
                "function or class defined in the project's modules or an installed package"
            )
        for origin in origins:
            public = _public(origin)
            if _stdlib(origin) and not (self._allowed(origin) or self._allowed(public)):
                raise ReferenceProblem(
                    f"{reference!r} reaches the standard library module {public!r}; add it to "
                    "allow_modules if the project really needs it"
                )

    def _refuse_stdlib(self, reference: str, value: Any) -> None:
        """Refuse a standard-library module or callable reached through another module."""
        if isinstance(value, types.ModuleType):
            origin = value.__name__
        elif isinstance(value, _FUNCTIONS):
            # Plain and built-in functions only: instances such as functools.partial report
            # their class's module, which says nothing about what they call.
            origin = getattr(value, "__module__", None) or ""
        else:
            return
        origin = _public(origin)
        if origin and _stdlib(origin) and not self._allowed(origin):
            raise ReferenceProblem(
                f"{reference!r} reaches the standard library module {origin!r}; add it to "
                "allow_modules if the project really needs it"
            )

    def _allowed(self, module_name: str) -> bool:
        parts = module_name.split(".")
        return any(".".join(parts[: i + 1]) in self.allow_modules for i in range(len(parts)))

    def _module(self, module_name: str) -> Any:
        cached = self._cache.get(module_name)
        if cached is not None:
            return cached
        failed = self._failed.get(module_name)
        if failed is not None:  # said once, at the first reference
            raise ReferenceProblem(str(failed), original=failed.original, repeated=True)
        self._check_origin(module_name)
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # the module's own code raised while importing
            problem = self._import_failed(module_name, exc)
            self._failed[module_name] = problem
            raise problem from None
        self._cache[module_name] = module
        return module

    def _import_failed(self, module_name: str, exc: Exception) -> ReferenceProblem:
        if (
            isinstance(exc, ModuleNotFoundError)
            and exc.name is not None
            and f"{module_name}.".startswith(f"{exc.name}.")
        ):
            return ReferenceProblem(
                f"cannot import module {module_name!r}: no module named {exc.name!r}; "
                "check the spelling or add its folder to python_path"
            )
        where = self._failing_line(exc)
        at = f" at {where}" if where else ""
        return ReferenceProblem(
            f"importing {module_name!r} failed{at}: {type(exc).__name__}: {exc}", original=exc
        )

    def _failing_line(self, exc: BaseException) -> str | None:
        """``file:line`` of the project code that raised while importing: the innermost frame
        outside the import machinery (for a syntax error, where it stands)."""
        if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
            return f"{self._shown(Path(exc.filename))}:{exc.lineno}"
        frames = [
            frame
            for frame in traceback.extract_tb(exc.__traceback__)
            if not frame.filename.startswith("<")
            and frame.filename != __file__
            and frame.filename != importlib.__file__
        ]
        roots = [*self.folders, self.base_dir.resolve()]
        own = [
            f
            for f in frames
            if any(Path(f.filename).resolve().is_relative_to(root) for root in roots)
        ]
        chosen = own or frames
        if not chosen:
            return None
        return f"{self._shown(Path(chosen[-1].filename))}:{chosen[-1].lineno}"

    def _check_origin(self, module_name: str) -> None:
        """A module already imported from elsewhere than the project's folders is refused."""
        top = module_name.partition(".")[0]
        loaded = sys.modules.get(top)
        if loaded is None or not self.folders:
            return
        loaded_file = getattr(loaded, "__file__", None)
        for folder in self.folders:
            for candidate in (folder / f"{top}.py", folder / top / "__init__.py"):
                if candidate.is_file():
                    if loaded_file is None or Path(loaded_file).resolve() != candidate.resolve():
                        raise ReferenceProblem(
                            f"module {top!r} is already imported from {loaded_file}, but the "
                            f"project's python_path provides {candidate}; rename one of them"
                        )
                    return
