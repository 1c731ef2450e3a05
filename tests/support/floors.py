"""Import every module of herald, actors, providers and models, and say which fail.

``make floors`` runs it in a virtualenv holding the lowest versions pyproject.toml allows:
a floor that lacks something herald imports fails here, by module, before any test runs.
Exit code 1 when a module fails to import.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings

PACKAGES = ("herald", "actors", "providers", "models")


def import_every_module() -> tuple[int, dict[str, str]]:
    """Import every module of :data:`PACKAGES`: how many there are, and each that failed
    with its error."""
    attempted = 0
    failures: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for top in PACKAGES:
            package = importlib.import_module(top)
            for module in pkgutil.walk_packages(package.__path__, f"{top}."):
                attempted += 1
                try:
                    importlib.import_module(module.name)
                except Exception as error:
                    failures[module.name] = f"{type(error).__name__}: {error}"
    return attempted, failures


def main() -> int:
    """Print each failing module (or how many imported) and return the exit code."""
    attempted, failures = import_every_module()
    for name, error in sorted(failures.items()):
        print(f"{name}: {error}")
    print(f"floors: {len(failures)} of {attempted} modules failed to import")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
