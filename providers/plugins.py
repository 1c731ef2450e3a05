"""Plugins built by name, once per settings object, from a table of name → class that is
imported on first use (so a process that never talks to a provider never loads its SDK).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from herald.settings import Settings, get_settings

P = TypeVar("P")


class PluginRegistry(Generic[P]):
    """Builds the plugins a comma-separated setting enables."""

    def __init__(self, classes: dict[str, tuple[str, str]],
                 enabled: Callable[[Settings], str]) -> None:
        #: name → (module, class); a plugin module adds itself here when it is not built in
        self.classes = classes
        self._enabled = enabled
        self._lock = threading.Lock()
        # keyed by id(settings); the settings object is kept so its id is never reused
        self._built: dict[int, tuple[Settings, dict[str, P]]] = {}

    def enabled(self, settings: Settings | None = None) -> list[str]:
        """The names the setting enables, in its order."""
        text = self._enabled(settings or get_settings())
        return [name.strip() for name in text.split(",") if name.strip()]

    def get(self, name: str, settings: Settings | None = None) -> P:
        """The plugin called ``name``; ``KeyError`` for one that is not known and enabled."""
        settings = settings or get_settings()
        if name not in self.enabled(settings) or name not in self.classes:
            raise KeyError(name)
        with self._lock:
            _, built = self._built.setdefault(id(settings), (settings, {}))
            if name not in built:
                module_name, class_name = self.classes[name]
                built[name] = getattr(importlib.import_module(module_name), class_name)(settings)
            return built[name]

    def reset(self) -> None:
        """Forget every built plugin (tests, or after a settings change)."""
        with self._lock:
            self._built.clear()
