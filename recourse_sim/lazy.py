"""Modules imported on first use: a light command (``recourse-sim validate``) that
reaches a module needing torch only for its computations does not pay torch's import."""

from __future__ import annotations

import importlib
import sys
from typing import Any


class LazyModule:
    """Stands for module `name` in the namespace `namespace` (a module's ``globals()``)
    under `alias`: the first attribute read imports the module and puts the real one in
    its place there, so later reads in that module cost nothing extra.

    Keep the real import for type checkers::

        if TYPE_CHECKING:
            import torch
        else:
            torch = LazyModule("torch", globals())
    """

    def __init__(self, name: str, namespace: dict[str, Any], alias: str | None = None) -> None:
        self._name = name
        self._namespace = namespace
        self._alias = alias or name.rpartition(".")[2]

    def _load(self) -> Any:
        module = importlib.import_module(self._name)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return module

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._load(), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def is_tensor(value: Any) -> bool:
    """Whether `value` is a torch tensor, without importing torch: before torch is
    imported, nothing is one (``isinstance(value, torch.Tensor)`` on a `LazyModule`
    imports it)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


__all__ = ["LazyModule", "is_tensor"]
