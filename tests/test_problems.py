"""One class a problem type: a ``slug`` is defined by one ProblemError class in the whole
codebase (subclasses inherit it, and may say in their own words when they answer it), so a
client sees one type with one title and status from every service. The types several services
share live in hiwallet.contracts.problems (or the platform's own, core.http)."""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict
from collections.abc import Iterator

import hiwallet
from hiwallet.core.http import ProblemError


def _every_module() -> None:
    for info in pkgutil.walk_packages(hiwallet.__path__, "hiwallet."):
        importlib.import_module(info.name)


def _subclasses(cls: type[ProblemError]) -> Iterator[type[ProblemError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_each_problem_type_is_defined_once() -> None:
    _every_module()
    defined: dict[str, list[str]] = defaultdict(list)
    for cls in set(_subclasses(ProblemError)):
        # ours, not a test's stand-in
        if "slug" in cls.__dict__ and cls.__module__.startswith("hiwallet."):
            defined[cls.__dict__["slug"]].append(f"{cls.__module__}.{cls.__qualname__}")
    assert len(defined) > 50  # the walk found the services' error trees
    twice = {slug: sorted(where) for slug, where in defined.items() if len(where) > 1}
    assert twice == {}, "define the type once (hiwallet.contracts.problems) and subclass it"
