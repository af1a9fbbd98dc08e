"""AsyncLLM on its own: streamed outputs, aborts, errors, and an engine thread that sleeps."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest

from prefixserve.engine.async_llm import AsyncLLM
from prefixserve.sampling_params import SamplingParams

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine() -> Iterator[AsyncLLM]:
    llm = AsyncLLM.from_kwargs(num_kv_blocks=256, max_model_len=512)
    yield llm
    llm.shutdown()


def _cpu_ticks(native_id: int) -> int:
    fields = open(f"/proc/self/task/{native_id}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_generate_streams_cumulative_outputs_until_finished(engine: AsyncLLM) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)

    async def run() -> list:
        return [out async for out in engine.generate("a1", "The sky is", params)]

    outs = asyncio.run(run())
    lengths = [len(o.outputs[0].token_ids) for o in outs]
    assert lengths == sorted(lengths) and lengths[-1] == 5
    assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    assert outs[-1].outputs[0].finish_reason == "length"


def test_leaving_generate_early_aborts_the_request(engine: AsyncLLM) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)

    async def run() -> int:
        agen = engine.generate("a2", "Count forever:", params)
        async for out in agen:
            if len(out.outputs[0].token_ids) >= 2:
                break
        await agen.aclose()
        for _ in range(200):
            stats = await engine.cache_stats()
            if stats["num_running"] == 0 and stats["num_waiting"] == 0:
                return stats["blocks_in_use"]
            await asyncio.sleep(0.01)
        raise AssertionError("the request was not aborted")

    assert asyncio.run(run()) == 0
    assert not engine.engine.has_unfinished_requests()


def test_add_request_errors_reach_the_caller_and_the_engine_lives_on(engine: AsyncLLM) -> None:
    async def run() -> str:
        with pytest.raises(ValueError):
            async for _ in engine.generate("a3", [1] * 600, SamplingParams(max_tokens=1)):
                pass
        await engine.add_request("dup", "x", SamplingParams(max_tokens=50, ignore_eos=True))
        with pytest.raises(ValueError, match="already in use"):
            await engine.add_request("dup", "x", SamplingParams(max_tokens=1))
        engine.abort("dup")
        outs = [o async for o in engine.generate("a4", "Hello", SamplingParams(temperature=0.0, max_tokens=2))]
        return outs[-1].outputs[0].text

    assert asyncio.run(run())


def test_idle_engine_thread_sleeps_instead_of_spinning(engine: AsyncLLM) -> None:
    assert os.path.exists("/proc/self/task"), "needs Linux /proc"
    tid = engine._thread.native_id
    time.sleep(0.2)
    before = _cpu_ticks(tid)
    time.sleep(1.0)
    assert _cpu_ticks(tid) - before <= 2  # clock ticks (1/100 s): a spinning thread burns ~100


def test_kv_events_fall_back_to_a_snapshot_when_the_subscriber_cannot_catch_up(engine: AsyncLLM) -> None:
    from prefixserve.kv_cache.kv_events import KVEventIndex, KVEventLog

    def small_ring() -> None:  # an empty cache and a 4-event ring, so a few requests overflow it
        kv = engine.engine.kv_cache
        assert kv.reset_prefix_cache()
        kv.events = kv.pool.events = KVEventLog(ring_size=4)

    asyncio.run(engine.call(small_ring))

    async def run() -> tuple[dict, dict, dict, dict]:
        for i in range(6):
            prompt = f"Subscriber test {i}: " + "many words to fill several blocks " * 6
            async for _ in engine.generate(f"ev{i}", prompt, SamplingParams(max_tokens=1)):
                pass
        latest = await engine.kv_events(None)
        seq = latest["seq"]
        return (await engine.kv_events(0), await engine.kv_events(seq - 1), await engine.kv_events(seq + 100),
                latest)

    behind, recent, ahead, latest = asyncio.run(run())
    assert latest["seq"] > 4  # more events than the ring holds
    assert "snapshot" in behind and "events" not in behind
    assert [e["seq"] for e in recent["events"]] == [latest["seq"]]
    assert "snapshot" in ahead  # a subscriber from another life of this worker resyncs
    index = KVEventIndex()
    index.load_snapshot(behind["snapshot"])
    assert len(index) == asyncio.run(engine.cache_stats())["blocks_cached"]
