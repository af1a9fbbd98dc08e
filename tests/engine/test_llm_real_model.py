"""The offline API on the real default model (SmolLM2-135M-Instruct), checked against transformers."""

from __future__ import annotations

import pytest
import torch

from prefixserve import LLM, SamplingParams

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
    "Question: What is 12 times 12?\nAnswer:",
    "In 1969, the first humans",
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(enable_prefix_caching=False)


@pytest.fixture(scope="module")
def hf_model(llm):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(llm.engine.checkpoint_path), dtype=torch.float32).eval()


def _tokens(outs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


def test_chat_answers_that_the_capital_of_france_is_paris(llm):
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0.0, max_tokens=32))
    assert "Paris" in out[0].outputs[0].text


def test_greedy_tokens_equal_transformers_greedy(llm, hf_model):
    tok = llm.get_tokenizer()
    params = SamplingParams(temperature=0.0, max_tokens=24)  # both stop at EOS
    ours = _tokens(llm.generate(PROMPTS, params, use_tqdm=False))
    for prompt, got in zip(PROMPTS, ours, strict=True):
        ids = tok.encode(prompt)
        with torch.inference_mode():
            ref = hf_model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                                    output_logits=True, return_dict_in_generate=True)
        want = ref.sequences[0, len(ids):].tolist()
        assert len(got) == len(want) or got != want[: len(got)], (prompt, got, want)
        if got != want:  # allowed only where transformers' own top-2 logits nearly tie
            i = next(k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
            top2 = ref.logits[i][0].float().topk(2).values
            assert (top2[0] - top2[1]).item() < 1e-3, f"{prompt!r}: diverged at token {i} without a near tie"


def test_continuous_batching_gives_the_same_tokens_as_one_at_a_time(llm):
    together = _tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False))
    alone = [_tokens(llm.generate(p, GREEDY, use_tqdm=False))[0] for p in PROMPTS]
    assert together == alone


@pytest.mark.parametrize("chunked", [True, False])
def test_chunked_prefill_and_tiny_budgets_do_not_change_outputs(llm, chunked):
    ref = _tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False))
    small = LLM(enable_prefix_caching=False, max_num_batched_tokens=5, enable_chunked_prefill=chunked)
    assert _tokens(small.generate(PROMPTS, GREEDY, use_tqdm=False)) == ref


def test_preemption_forced_by_a_tiny_kv_pool_does_not_change_outputs(llm):
    ref = _tokens(llm.generate(PROMPTS, GREEDY, use_tqdm=False))
    tiny = LLM(enable_prefix_caching=False, block_size=4, num_kv_blocks=24)
    assert _tokens(tiny.generate(PROMPTS, GREEDY, use_tqdm=False)) == ref
    assert tiny.cache_stats()["num_preemptions"] > 0


def test_same_seed_gives_the_same_sample_and_n_gives_n_completions(llm):
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, min_p=0.01, seed=1234, max_tokens=12, n=3)
    a = llm.generate(PROMPTS[2], params, use_tqdm=False)[0]
    b = llm.generate([PROMPTS[0], PROMPTS[2]], params, use_tqdm=False)[1]
    assert len(a.outputs) == 3 and [o.index for o in a.outputs] == [0, 1, 2]
    assert _tokens([a]) == _tokens([b]) and [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]
    assert len({tuple(o.token_ids) for o in a.outputs}) > 1


def test_stop_string_ends_the_text_before_it(llm):
    free = llm.generate(PROMPTS[4], GREEDY, use_tqdm=False)[0].outputs[0].text
    stop = free.strip()[:3]
    out = llm.generate(PROMPTS[4], SamplingParams(temperature=0.0, max_tokens=24, stop=[stop]), use_tqdm=False)
    comp = out[0].outputs[0]
    assert comp.finish_reason == "stop" and comp.stop_reason == stop
    assert stop not in comp.text and free.startswith(comp.text)


def test_stop_token_ids_and_max_tokens_finish_reasons(llm):
    first = llm.generate(PROMPTS[0], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=24, stop_token_ids=[first[2]]),
                       use_tqdm=False)[0].outputs[0]
    assert out.token_ids == first[:3] and out.finish_reason == "stop" and out.stop_reason == first[2]
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True), use_tqdm=False)
    assert out[0].outputs[0].finish_reason == "length" and len(out[0].outputs[0].token_ids) == 5


def test_token_id_prompts_and_order_are_kept(llm):
    ids = llm.get_tokenizer().encode(PROMPTS[0])
    outs = llm.generate([{"prompt_token_ids": ids}, PROMPTS[1]], GREEDY, use_tqdm=False)
    assert outs[0].prompt_token_ids == ids and outs[1].prompt == PROMPTS[1]
    assert _tokens(outs)[0] == _tokens(llm.generate(PROMPTS[0], GREEDY, use_tqdm=False))[0]


@pytest.mark.parametrize("kwargs, match", [
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
])
def test_bad_sampling_params_raise_value_error_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_unknown_model_path_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="does-not-exist"):
        LLM(str(tmp_path / "does-not-exist"))


def test_prompt_too_long_raises_value_error_and_the_engine_keeps_serving(llm):
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate({"prompt_token_ids": [1] * (llm.engine.max_model_len + 5)}, GREEDY, use_tqdm=False)
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=2), use_tqdm=False)[0].finished
