"""One object of a kind per crawler: the owners the components share.

The pacer, the request marks, the audit trail, the state stores and the
context through which components ask each other
(:mod:`~scrapy_walsh_research._runtime.context`) are each built once per
crawler and found again by every component that needs them. They are kept
weakly, by crawler, so a finished crawl's objects go with it. No component
is kept here for others to look up: what one offers, it offers through the
context.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler

T = TypeVar("T")

_objects: weakref.WeakKeyDictionary[Crawler, dict[object, Any]] = weakref.WeakKeyDictionary()


def _slots(crawler: Crawler) -> dict[object, Any]:
    slots = _objects.get(crawler)
    if slots is None:
        slots = _objects[crawler] = {}
    return slots


def per_crawler(crawler: Crawler, key: object, factory: Callable[[], T]) -> T:
    """The crawler's object under *key*, built by *factory* on first use."""
    slots = _slots(crawler)
    if key not in slots:
        slots[key] = factory()
    return cast("T", slots[key])

