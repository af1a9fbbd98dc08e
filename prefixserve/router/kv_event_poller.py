"""Polls every worker's `GET /kv_events?since=SEQ` and feeds the kv_events policy's index.

A worker answers `{"events": [...], "seq": N}` or, when the poller is too far behind (or asks
with `since=-1`, as it does on join), `{"snapshot": {"seq", "blocks"}, "seq": N}`. Optional
fields, as the prefixserve server sends them: `"kv_cache_usage"` (fraction of KV blocks in
use; `"kv_usage"` also accepted) feeds the policy's KV-usage score, `"block_size"` sets the
block size the prompt is cut into. A sequence
number that goes backwards (the worker restarted) or a gap in the events makes the poller ask
for a fresh snapshot. A worker that answers 404 has no event endpoint and is polled rarely.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from prefixserve.router.router import Router

logger = logging.getLogger(__name__)

RESYNC = -1  # `since` value that asks the worker for a full snapshot
UNSUPPORTED_BACKOFF_POLLS = 50


class KVEventPoller:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.policy: Any = router.policy
        self.since: dict[str, int] = {}
        self._skip: dict[str, int] = {}  # polls to skip for workers without the endpoint

    def forget(self, url: str) -> None:
        self.since.pop(url, None)
        self._skip.pop(url, None)

    async def run(self) -> None:
        interval = self.policy.config.kv_events_poll_interval_secs
        while True:
            await self.poll_all()
            await asyncio.sleep(interval)

    async def poll_all(self) -> None:
        urls = list(self.router.workers)
        await asyncio.gather(*(self._poll(url) for url in urls), return_exceptions=True)

    async def _poll(self, url: str) -> None:
        if self._skip.get(url, 0) > 0:
            self._skip[url] -= 1
            return
        client = self.router.client
        assert client is not None
        since = self.since.get(url, RESYNC)
        try:
            resp = await client.get(f"{url}/kv_events", params={"since": since}, timeout=5.0)
        except httpx.TransportError:
            return
        if resp.status_code == 404:
            if url not in self._skip:
                logger.warning("router: %s has no /kv_events; kv_events routes it by load", url)
            self._skip[url] = UNSUPPORTED_BACKOFF_POLLS
            return
        if resp.status_code != 200 or url not in self.router.workers:
            return
        self.apply(url, since, resp.json())

    def apply(self, url: str, since: int, data: dict[str, Any]) -> None:
        """Apply one `/kv_events` answer for `url`, polled with `since`."""
        index = self.policy.index
        seq = int(data.get("seq", 0))
        usage = data.get("kv_cache_usage", data.get("kv_usage"))
        if usage is not None:
            self.policy.kv_usage[url] = float(usage)
        if data.get("block_size"):
            index.block_size_seen = int(data["block_size"])
        if "snapshot" in data:
            index.load_snapshot(url, data["snapshot"])
            self.since[url] = seq
            return
        events = data.get("events", [])
        if seq < since or (events and events[0]["seq"] > since + 1 and since != RESYNC):
            self.since[url] = RESYNC  # restarted or a gap: resynchronise from a snapshot
            return
        index.apply_events(url, [e for e in events if e["seq"] > since])
        self.since[url] = seq
