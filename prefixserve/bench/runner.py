"""BenchmarkRunner: drives a Workload through an OpenAIClient at a concurrency or request rate.

Requests become ready when the workload says so (all at once for static workloads, after
their parent's answer for multi-turn and tree-of-thought) and are dispatched in ready order:
with a concurrency limit, as soon as fewer than C are in flight; with a request rate, at
Poisson arrival times (seeded). A failed request unlocks nothing, and the run goes on.
It knows nothing about statistics: it returns the RequestResults in completion order.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import deque

from tqdm import tqdm

from prefixserve.bench.client import OpenAIClient, RequestResult
from prefixserve.bench.workloads import RequestSpec, Workload


class BenchmarkRunner:
    def __init__(
        self,
        workload: Workload,
        client: OpenAIClient,
        concurrency: int | None = None,
        request_rate: float | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> None:
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if request_rate is not None and request_rate <= 0:
            raise ValueError(f"request rate must be > 0 requests/s, got {request_rate}")
        self.workload = workload
        self.client = client
        self.concurrency = concurrency
        self.request_rate = request_rate
        self.rng = random.Random(seed)
        self.progress = progress
        self.duration_s = 0.0

    def next_gap(self) -> float:
        return self.rng.expovariate(self.request_rate) if self.request_rate else 0.0

    async def run(self) -> list[RequestResult]:
        bar = tqdm(
            total=self.workload.expected_requests(),
            desc=self.workload.name,
            unit="req",
            file=sys.stderr,
            disable=not self.progress,
        )
        ready: deque[RequestSpec] = deque(self.workload.start())
        in_flight: dict[asyncio.Task[RequestResult], RequestSpec] = {}
        results: list[RequestResult] = []
        limit = self.concurrency or (sys.maxsize if self.request_rate else 1)
        run_start = time.perf_counter()
        next_send = run_start
        index = 0
        while ready or in_flight:
            now = time.perf_counter()
            while ready and len(in_flight) < limit and now >= next_send:
                spec = ready.popleft()
                task = asyncio.create_task(self.client.send(spec, index, run_start))
                in_flight[task] = spec
                index += 1
                next_send = max(next_send, now) + self.next_gap()
            timeout = max(0.0, next_send - now) if ready and len(in_flight) < limit else None
            if not in_flight:
                await asyncio.sleep(timeout or 0.0)
                continue
            done, _ = await asyncio.wait(
                in_flight, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                spec = in_flight.pop(task)
                result = task.result()
                results.append(result)
                bar.update(1)
                if result.ok:
                    ready.extend(self.workload.next(spec, result.answer))
                else:
                    bar.total -= self.unsent_descendants(spec)
                    bar.set_postfix(errors=sum(not r.ok for r in results))
        self.duration_s = time.perf_counter() - run_start
        bar.close()
        return results

    def unsent_descendants(self, spec: RequestSpec) -> int:
        """How many requests a failure of `spec` cancels (for the progress bar total)."""
        queue, count = deque([spec]), 0
        while queue:
            children = self.workload.next(queue.popleft(), "")
            count += len(children)
            queue.extend(children)
        return count
