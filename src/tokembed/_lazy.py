"""PEP 562 lazy public names: a package lists ``name -> module`` and imports each module on first use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, namespace: dict[str, Any], public: Mapping[str, str]) -> tuple[Callable, Callable]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` for its ``public`` names.

    Args:
        package: the package's name, for error messages and relative module paths.
        namespace: the package's ``globals()``; a loaded name is stored there, so later lookups skip ``__getattr__``.
        public: name -> module (absolute, or relative to ``package`` when it has no "tokembed." prefix).
    """

    def __getattr__(name: str):
        module = public.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        path = module if module.startswith("tokembed.") else f"{package}.{module}"
        value = getattr(importlib.import_module(path), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
