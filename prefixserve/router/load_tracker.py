"""In-flight request counts per worker, with O(1) least-loaded lookup.

Loads change by one at a time (a request is dispatched or finishes), so workers are kept in
buckets keyed by load and the minimum and maximum move by at most one step per change. The
least-loaded worker is drawn at random from the lowest bucket, which breaks ties without a
scan over the fleet. The tracker knows worker urls only; it does not know about health.
"""

from __future__ import annotations

import random


class IndexedSet:
    """A set with O(1) add, discard and uniform random choice (list + position map)."""

    __slots__ = ("_items", "_pos")

    def __init__(self) -> None:
        self._items: list[str] = []
        self._pos: dict[str, int] = {}

    def add(self, item: str) -> None:
        if item not in self._pos:
            self._pos[item] = len(self._items)
            self._items.append(item)

    def discard(self, item: str) -> None:
        i = self._pos.pop(item, None)
        if i is None:
            return
        last = self._items.pop()
        if i < len(self._items):
            self._items[i] = last
            self._pos[last] = i

    def choice(self, rng: random.Random) -> str:
        return self._items[rng.randrange(len(self._items))]

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._pos

    def __iter__(self):
        return iter(self._items)


class LoadTracker:
    """url -> in-flight count; `least_loaded()` is O(1) with random tie-breaking."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.loads: dict[str, int] = {}
        self._buckets: dict[int, IndexedSet] = {}
        self.total = 0
        self.min_load = 0
        self.max_load = 0

    def __len__(self) -> int:
        return len(self.loads)

    def __contains__(self, url: object) -> bool:
        return url in self.loads

    def get(self, url: str) -> int:
        return self.loads.get(url, 0)

    def add(self, url: str) -> None:
        if url in self.loads:
            return
        self.loads[url] = 0
        self._bucket(0).add(url)
        self.min_load = 0
        self.max_load = max(self.max_load, 0) if len(self.loads) > 1 else 0

    def remove(self, url: str) -> None:
        load = self.loads.pop(url, None)
        if load is None:
            return
        self.total -= load
        self._leave(load, url)
        self._recompute_bounds()

    def inc(self, url: str) -> None:
        load = self.loads.get(url)
        if load is None:
            return
        self._leave(load, url)
        self.loads[url] = load + 1
        self._bucket(load + 1).add(url)
        self.total += 1
        if load == self.min_load and load not in self._buckets:
            self.min_load = load + 1
        self.max_load = max(self.max_load, load + 1)

    def dec(self, url: str) -> None:
        load = self.loads.get(url)
        if not load:  # unknown worker, or already zero
            return
        self._leave(load, url)
        self.loads[url] = load - 1
        self._bucket(load - 1).add(url)
        self.total -= 1
        self.min_load = min(self.min_load, load - 1)
        if load == self.max_load and load not in self._buckets:
            self.max_load = load - 1

    def least_loaded(self) -> str:
        """A uniformly random worker among those with the lowest load."""
        return self._buckets[self.min_load].choice(self.rng)

    def least_loaded_of(self, urls: list[str] | set[str]) -> str:
        """The lowest-load url of `urls` (random tie-break); O(len(urls))."""
        best: list[str] = []
        best_load = -1
        for url in urls:
            load = self.loads.get(url, 0)
            if best_load < 0 or load < best_load:
                best, best_load = [url], load
            elif load == best_load:
                best.append(url)
        return best[0] if len(best) == 1 else best[self.rng.randrange(len(best))]

    def _bucket(self, load: int) -> IndexedSet:
        bucket = self._buckets.get(load)
        if bucket is None:
            bucket = self._buckets[load] = IndexedSet()
        return bucket

    def _leave(self, load: int, url: str) -> None:
        bucket = self._buckets[load]
        bucket.discard(url)
        if not bucket:
            del self._buckets[load]

    def _recompute_bounds(self) -> None:
        self.min_load = min(self._buckets, default=0)
        self.max_load = max(self._buckets, default=0)
