"""Name -> unit registries (collectives, algorithms, strategies) with did-you-mean errors."""

import importlib
from typing import Callable, Generic, Iterator, TypeVar

from bench.errors import unknown

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str):
        self.what = what  # e.g. "collective"; used in error messages
        self._items: dict[str, T] = {}

    def register(self, obj: T, name: str | None = None) -> T:
        key = name or getattr(obj, "name")
        if key in self._items:
            raise ValueError(f"{self.what} '{key}' registered twice")
        self._items[key] = obj
        return obj

    def get(self, name: str) -> T:
        if name not in self._items:
            raise unknown(self.what, name, self._items)
        return self._items[name]

    def select(self, names) -> list[str]:
        """Registered names for a user's list; ("all",) or () selects every unit."""
        if tuple(names) in (("all",), ()):
            return self.names()
        for n in names:
            self.get(n)  # unknown names fail here, with a did-you-mean
        return list(names)

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())


def on_first_use(package: str, units: tuple[str, ...], exports: list[str]) -> Callable[[str], object]:
    """A package's module `__getattr__` (PEP 562): the first use of one of `exports` (e.g. REGISTRY)
    imports every unit module in `units` order (each registers itself; that order is the display
    order), then returns the name from the package's `base` module. The package's own import stays
    light: the units import torch, and the kinds' registrations, which every command reads, must not."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for unit in units:
            importlib.import_module(f"{package}.{unit}")
        return getattr(importlib.import_module(f"{package}.base"), name)

    return __getattr__
