"""The module paths of 0.2.0 (and the few 0.3.0 ones that moved since),
importable until 0.4.0.

A project's settings name components by path, and its code may import from
a 0.2.0 module. Each 0.2.0 module that no longer exists is made when first
imported, by a finder the package installs (:func:`install`): a thin module
that warns once and hands every name on from where it lives now, so a class
is the same object whichever path names it (a component written by its old
path and by its new one is one component). The start-up check also warns,
once per crawl, about each old path the settings name
(:func:`scrapy_walsh_research.settings.check.deprecations`). The component
paths to write now are exported from the package root.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec

_P = "scrapy_walsh_research"
#: old module -> the modules its names live in now, searched in order
MOVED: dict[str, tuple[str, ...]] = {
    f"{_P}.scope": (f"{_P}.gates.scope",),
    f"{_P}.cadence": (f"{_P}.gates.cadence",),
    f"{_P}.blocklist": (f"{_P}.gates.blocklist",),
    f"{_P}.blocklist.middleware": (f"{_P}.gates.blocklist.middleware",),
    f"{_P}.blocklist.refresh": (f"{_P}.documents.blocklist.refresh",),
    f"{_P}.blocklist.store": (f"{_P}.documents.blocklist.store",),
    f"{_P}.blocklist.build": (f"{_P}.documents.blocklist.build",),
    f"{_P}.blocklist.schema": (f"{_P}.documents.blocklist.schema",),
    f"{_P}.robots": (f"{_P}.gates.robots",),
    f"{_P}.usage": (f"{_P}.gates.preferences",),
    f"{_P}.origin_documents": (f"{_P}.gates.origin_documents",),
    f"{_P}.waits": (f"{_P}.documents.waits",),
    f"{_P}.validators": (f"{_P}.gates.validators",),
    f"{_P}.structured": (f"{_P}.gates.negotiation", f"{_P}.spiders.structured"),
    f"{_P}.retry": (f"{_P}.gates.retry", f"{_P}._runtime.meta"),
    f"{_P}.pacing": (f"{_P}.gates.pacing", f"{_P}.scheduling.pacer", f"{_P}._runtime.meta"),
    f"{_P}.useragent": (f"{_P}.gates.useragent",),
    f"{_P}.frontier": (f"{_P}.scheduling.frontier",),
    f"{_P}.wire": (f"{_P}.scheduling.wire",),
    f"{_P}._engine": (f"{_P}.scheduling._engine",),
    f"{_P}.adaptive": (
        f"{_P}.settings.adaptive",
        f"{_P}.state.hostload",
        f"{_P}.scheduling.adaptive",
    ),
    f"{_P}.defaults": (f"{_P}.settings.defaults",),
    f"{_P}.options": (f"{_P}.settings.options",),
    f"{_P}.bounds": (f"{_P}.settings.options",),
    f"{_P}.preflight": (f"{_P}.settings.check",),
    f"{_P}.internal": (f"{_P}._runtime.marks", f"{_P}._runtime.meta"),
    f"{_P}.schemas": (f"{_P}.core.blocklist.schema",),
    f"{_P}.core.blocklist_document": (f"{_P}.core.blocklist.document",),
    f"{_P}.core.blocklist_entries": (f"{_P}.core.blocklist.entries",),
    f"{_P}.core.blocklist_index": (f"{_P}.core.blocklist.index",),
    f"{_P}.core.blocklist_child": (f"{_P}.core.blocklist.child",),
    f"{_P}.core.tdmrep": (f"{_P}.core.preferences.tdmrep",),
    f"{_P}.core.usage_statements": (f"{_P}.core.preferences.statements",),
    # 0.3.0 module paths of what the document gates share (gates/ holds gates)
    f"{_P}.gates.waits": (f"{_P}.documents.waits",),
    f"{_P}.gates.names": (f"{_P}.documents.names",),
    f"{_P}.gates.blocklist.refresh": (f"{_P}.documents.blocklist.refresh",),
    f"{_P}.gates.blocklist.store": (f"{_P}.documents.blocklist.store",),
    f"{_P}.gates.blocklist.build": (f"{_P}.documents.blocklist.build",),
    f"{_P}.gates.blocklist.schema": (f"{_P}.documents.blocklist.schema",),
    f"{_P}.gates.sitemap_documents": (f"{_P}.documents.sitemap_documents",),
}
#: names renamed with their module: (0.2.0 module, 0.2.0 name) -> the name now
RENAMED: dict[tuple[str, str], str] = {
    (f"{_P}.usage", "UsagePreferencesMiddleware"): "PreferencesMiddleware",
}


def warn(message: str, stacklevel: int = 2) -> None:
    """Warn with :class:`~scrapy_walsh_research.errors.WalshDeprecationWarning`.

    The errors module (and Scrapy with it) is imported only here, when a
    0.2.0 path is used: importing the package itself loads no Scrapy (the
    child process that reads a large blocklist imports only the pure core).
    """
    from scrapy_walsh_research.errors import WalshDeprecationWarning

    warnings.warn(message, WalshDeprecationWarning, stacklevel=stacklevel + 1)


class MovedModule(types.ModuleType):
    """A 0.2.0 module: every name handed on from where it lives now."""

    def __init__(self, name: str, homes: Sequence[str]) -> None:
        super().__init__(name, f"Moved in 0.3.0 to {', '.join(homes)}; removed in 0.4.0.")
        self._homes = tuple(homes)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        renamed = RENAMED.get((self.__name__, name))
        if renamed is not None:
            warn(f"{self.__name__}.{name} is {self._homes[0]}.{renamed} now", stacklevel=2)
            name = renamed
        for home in self._homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        names = {n for home in self._homes for n in dir(importlib.import_module(home))}
        return sorted(names | {old for module, old in RENAMED if module == self.__name__})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the 0.2.0 modules that no longer exist (last, after every other finder)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in MOVED:
            return None
        # a package when 0.2.0 modules lived under it (blocklist.middleware)
        package = any(name.startswith(f"{fullname}.") for name in MOVED)
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def create_module(self, spec: ModuleSpec) -> types.ModuleType:
        return MovedModule(spec.name, MOVED[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        homes = MOVED[module.__name__]
        # gates/ came in 0.3.0: a moved path under it is a 0.3.0 one
        version = "0.3.0" if module.__name__.startswith(f"{_P}.gates.") else "0.2.0"
        warn(
            f"{module.__name__} is the {version} path of {' and '.join(homes)}: import from "
            "there, and name components by the paths the package root exports "
            f"({_P}.RobotsTxtMiddleware, ...). The old path goes in 0.4.0.",
            stacklevel=3,
        )


def install() -> None:
    """Let the 0.2.0 module paths import (once per process)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
