"""Prefix caching on the real default model: the oracle is the same model with caching off.

Greedy outputs must be identical token for token with caching off, hash, and radix (token
level and 16-token pages) on multi-turn chat, few-shot and tree-of-thought workloads, and
each chat turn must hit (almost) all of the previous turn's prompt and answer.
"""

from __future__ import annotations

import pytest

from prefixserve import LLM, SamplingParams

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
CONFIGS = {
    "off": dict(enable_prefix_caching=False),
    "hash16": dict(prefix_cache="hash", block_size=16),
    "radix1": dict(prefix_cache="radix", block_size=1),
    "radix16": dict(prefix_cache="radix", block_size=16),
}
QUESTIONS = ["What is the capital of France?", "And of Italy?", "Which of the two is larger?", "Name a river there."]
FEW_SHOT = "".join(f"Q: What is {a} plus {b}?\nA: {a + b}\n\n" for a, b in
                   [(2, 3), (10, 7), (21, 4), (8, 8), (13, 29), (40, 2), (6, 5), (99, 1)])


@pytest.fixture(scope="module")
def engines() -> dict[str, LLM]:
    return {name: LLM(**cfg) for name, cfg in CONFIGS.items()}


def chat_session(llm: LLM, questions: list[str]) -> list[tuple[list[int], int, list[int]]]:
    """Run a conversation turn by turn; per turn (prompt ids, cached tokens, answer ids)."""
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are a concise geography tutor."}]
    turns = []
    for q in questions:
        messages.append({"role": "user", "content": q})
        out = llm.chat(messages, GREEDY, use_tqdm=False)[0]
        turns.append((out.prompt_token_ids, out.num_cached_tokens, out.outputs[0].token_ids))
        messages.append({"role": "assistant", "content": out.outputs[0].text})
    return turns


def tree_of_thought(llm: LLM, levels: int = 3, branches: int = 2) -> list[list[int]]:
    frontier = ["Question: how can a city reduce traffic? Let us think step by step.\n"]
    answers = []
    for _ in range(levels):
        prompts = [f"{p}Idea {i + 1}:" for p in frontier for i in range(branches)]
        outs = llm.generate(prompts, GREEDY, use_tqdm=False)
        answers += [o.outputs[0].token_ids for o in outs]
        frontier = [p + o.outputs[0].text + "\n" for p, o in zip(prompts, outs, strict=True)]
    return answers


def test_multi_turn_outputs_identical_with_caching_off_hash_and_radix(engines):
    results = {name: [t[2] for t in chat_session(llm, QUESTIONS)] for name, llm in engines.items()}
    assert all(r == results["off"] for r in results.values()), results


@pytest.mark.parametrize("name", ["hash16", "radix1", "radix16"])
def test_each_chat_turn_hits_almost_all_of_the_previous_turn(engines, name):
    llm = engines[name]
    llm.reset_prefix_cache()
    turns = chat_session(llm, [q + " (again)" for q in QUESTIONS])
    block = CONFIGS[name]["block_size"]
    for (prev_prompt, _, prev_answer), (_, cached, _) in zip(turns, turns[1:], strict=False):
        # the last sampled token never had its K/V computed; then round down to whole blocks
        assert cached >= len(prev_prompt) + len(prev_answer) - 1 - block - 1, (name, cached, len(prev_prompt))


def test_few_shot_outputs_identical_and_the_header_is_served_from_cache(engines):
    prompts = [FEW_SHOT + f"Q: What is {a} plus {b}?\nA:" for a, b in [(3, 4), (50, 25), (7, 70), (12, 12)]]
    ref = [o.outputs[0].token_ids for o in engines["off"].generate(prompts, GREEDY, use_tqdm=False)]
    for name in ("hash16", "radix1", "radix16"):
        llm = engines[name]
        llm.reset_prefix_cache()
        outs = llm.generate(prompts, GREEDY, use_tqdm=False)
        assert [o.outputs[0].token_ids for o in outs] == ref, name
        header = len(llm.get_tokenizer().encode(FEW_SHOT))
        assert all(o.num_cached_tokens >= header - 16 for o in outs[1:]), (name, [o.num_cached_tokens for o in outs])


def test_tree_of_thought_outputs_identical_across_caches(engines):
    ref = tree_of_thought(engines["off"])
    for name in ("hash16", "radix1", "radix16"):
        engines[name].reset_prefix_cache()
        assert tree_of_thought(engines[name]) == ref, name


def test_n_samples_share_the_prompt_blocks(engines):
    llm = engines["hash16"]
    llm.reset_prefix_cache()
    prompt = FEW_SHOT + "Q: What is 1 plus 1?\nA:"
    out = llm.generate(prompt, SamplingParams(temperature=0.8, seed=3, max_tokens=8, n=4), use_tqdm=False)[0]
    assert len(out.outputs) == 4
    stats = llm.cache_stats()
    n_prompt = len(out.prompt_token_ids)
    assert stats["hits"] >= 3 * (n_prompt - 16), stats


def test_reset_prefix_cache_makes_the_next_request_cold(engines):
    llm = engines["hash16"]
    prompt = FEW_SHOT + "Q: What is 2 plus 2?\nA:"
    llm.generate(prompt, GREEDY, use_tqdm=False)
    assert llm.generate(prompt, GREEDY, use_tqdm=False)[0].num_cached_tokens > 0
    assert llm.reset_prefix_cache() is True
    assert llm.generate(prompt, GREEDY, use_tqdm=False)[0].num_cached_tokens == 0
    stats = llm.cache_stats()
    assert {"queries", "hits", "evictions", "blocks_in_use", "blocks_cached", "blocks_free"} <= set(stats)


def test_different_cache_salts_never_share(engines):
    llm = engines["radix1"]
    llm.reset_prefix_cache()
    prompt = FEW_SHOT + "Q: What is 5 plus 5?\nA:"
    llm.generate(prompt, GREEDY, use_tqdm=False, cache_salt="tenant-a")
    assert llm.generate(prompt, GREEDY, use_tqdm=False, cache_salt="tenant-b")[0].num_cached_tokens == 0
    assert llm.generate(prompt, GREEDY, use_tqdm=False, cache_salt="tenant-a")[0].num_cached_tokens > 0
