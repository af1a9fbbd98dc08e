"""WaitingQueue: the order in which waiting requests are offered to the scheduler.

`fcfs` keeps arrival order (preempted requests go back to the front). `lpm` (SGLang's
longest-prefix-match) offers first the requests with the most tokens already in the prefix
cache, so requests that share a prefix run while it is still cached. Two bounds keep lpm
fair: above `lpm_max_queue` waiting requests sorting costs more than it saves and the queue
falls back to fcfs; a request passed over `lpm_max_skips` times goes first. Knows nothing
about blocks: the caller supplies the cached-prefix length of a request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prefixserve.request import Request


class WaitingQueue:
    def __init__(self, policy: str = "fcfs", lpm_max_queue: int = 128, lpm_max_skips: int = 32) -> None:
        self.policy = policy
        self.lpm_max_queue = lpm_max_queue
        self.lpm_max_skips = lpm_max_skips
        self._items: list[Request] = []
        self._skips: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)

    def append(self, req: Request) -> None:
        self._items.append(req)

    def push_front(self, req: Request) -> None:
        self._items.insert(0, req)

    def remove(self, req: Request) -> None:
        self._items.remove(req)
        self._skips.pop(req.request_id, None)

    def ordered(self, cached_prefix_len: Callable[[Request], int]) -> list[Request]:
        """A snapshot of the queue in the order requests should be tried this step."""
        if self.policy != "lpm" or len(self._items) > self.lpm_max_queue:
            return list(self._items)
        starved = [r for r in self._items if self._skips.get(r.request_id, 0) >= self.lpm_max_skips]
        rest = [r for r in self._items if self._skips.get(r.request_id, 0) < self.lpm_max_skips]
        position = {id(r): i for i, r in enumerate(self._items)}
        rest.sort(key=lambda r: (-cached_prefix_len(r), position[id(r)]))
        return starved + rest

    def note_scheduled(self, scheduled: list[Request]) -> None:
        """Count a skip for each still-waiting request that arrived before one that ran."""
        if self.policy != "lpm" or not scheduled:
            return
        latest = max(r.arrival_time for r in scheduled)
        for r in self._items:
            if r.arrival_time < latest:
                self._skips[r.request_id] = self._skips.get(r.request_id, 0) + 1
