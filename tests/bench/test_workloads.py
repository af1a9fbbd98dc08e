"""Workload generators: deterministic per seed, and sharing exactly what they claim."""

from __future__ import annotations

import pytest

from prefixserve.bench.workloads import WORKLOADS, RequestSpec, build_workload, expand


def answer_of(spec: RequestSpec) -> str:
    return f" answer to {spec.request_id}."


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_same_seed_gives_same_requests(name: str) -> None:
    a = expand(build_workload(name, seed=3), answer_of)
    b = expand(build_workload(name, seed=3), answer_of)
    assert a == b
    assert len(a) > 0


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_different_seed_gives_different_prompts(name: str) -> None:
    a = [s.prompt_text() for s in expand(build_workload(name, seed=0), answer_of)]
    b = [s.prompt_text() for s in expand(build_workload(name, seed=1), answer_of)]
    assert a != b


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_expected_requests_matches_full_expansion(name: str) -> None:
    workload = build_workload(name, num_requests=20)
    specs = expand(workload, answer_of)
    assert len(specs) == workload.expected_requests()
    assert len({s.request_id for s in specs}) == len(specs)
    assert all(s.max_tokens == workload.max_tokens for s in specs)


@pytest.mark.parametrize("name", [n for n in WORKLOADS if n != "tree-of-thought"])
def test_num_requests_is_honored(name: str) -> None:
    assert len(expand(build_workload(name, num_requests=24), answer_of)) == 24


def test_few_shot_prompts_share_the_header_and_differ_after_it() -> None:
    workload = build_workload("few-shot", num_requests=10, num_examples=8)
    header = workload.header()
    specs = workload.start()
    assert header.count("Question:") == 8
    assert all(s.prompt.startswith(header) for s in specs)
    assert len({s.prompt[len(header) :] for s in specs}) == 10


def test_self_consistency_repeats_one_prompt() -> None:
    specs = build_workload("self-consistency", num_requests=6).start()
    assert len(specs) == 6 and len({s.prompt for s in specs}) == 1
    assert all(s.n == 1 and s.temperature > 0 for s in specs)
    assert "step by step" in specs[0].prompt


def test_self_consistency_with_n_field_sends_one_request_per_question() -> None:
    specs = build_workload(
        "self-consistency", num_requests=8, num_questions=2, use_n_field=True
    ).start()
    assert [s.n for s in specs] == [4, 4]
    assert specs[0].prompt != specs[1].prompt


def test_multi_turn_next_turn_extends_previous_turn_with_its_answer() -> None:
    workload = build_workload("multi-turn", num_requests=12, num_conversations=3)
    specs = expand(workload, answer_of)
    by_id = {s.request_id: s for s in specs}
    assert sorted({s.group for s in specs}) == ["conv-0", "conv-1", "conv-2"]
    assert max(s.turn for s in specs) == 3
    for spec in specs:
        assert spec.is_chat and spec.messages[-1]["role"] == "user"
        if spec.turn == 0:
            assert spec.parent_id is None and spec.messages[0]["role"] == "system"
            continue
        parent = by_id[spec.parent_id]
        assert spec.turn == parent.turn + 1 and spec.group == parent.group
        assert spec.messages[: len(parent.messages)] == parent.messages
        assert spec.messages[len(parent.messages)] == {
            "role": "assistant",
            "content": answer_of(parent),
        }
        assert spec.prompt_text().startswith(parent.prompt_text())


def test_multi_turn_conversations_have_distinct_system_prompts_unless_shared() -> None:
    first = build_workload("multi-turn", num_conversations=4).start()
    assert len({s.messages[0]["content"] for s in first}) == 4
    shared = build_workload("multi-turn", num_conversations=4, shared_system_prompt=True).start()
    assert len({s.messages[0]["content"] for s in shared}) == 1


def test_multi_turn_starts_only_first_turns() -> None:
    starts = build_workload("multi-turn", num_requests=20, num_conversations=5).start()
    assert [s.turn for s in starts] == [0] * 5


def test_tree_of_thought_children_extend_parent_prompt_and_answer() -> None:
    workload = build_workload("tree-of-thought", num_requests=15, branches=2, depth=4)
    specs = expand(workload, answer_of)
    assert len(specs) == 1 + 2 + 4 + 8
    by_id = {s.request_id: s for s in specs}
    for spec in specs[1:]:
        parent = by_id[spec.parent_id]
        assert spec.turn == parent.turn + 1
        assert spec.prompt.startswith(parent.prompt + answer_of(parent))
    depth1 = [s for s in specs if s.turn == 1]
    assert len({s.prompt for s in depth1}) == 2  # siblings differ after the shared part


def test_tree_of_thought_is_breadth_first() -> None:
    specs = expand(build_workload("tree-of-thought", branches=3, depth=3), answer_of)
    assert [s.turn for s in specs] == sorted(s.turn for s in specs)


def test_table_qa_questions_share_the_table_and_ask_about_people_in_it() -> None:
    workload = build_workload("table-qa", num_requests=12, num_rows=30)
    people = workload.people()
    specs = workload.start()
    table = workload.table(people)
    assert len(people) == 30 and len({p["name"] for p in people}) == 30
    assert table.count("\n") == 31  # header, separator, 30 rows
    names = {p["name"] for p in people}
    for spec in specs:
        head, question = spec.prompt.rsplit("Question: ", 1)
        assert table in head and head == specs[0].prompt.rsplit("Question: ", 1)[0]
        assert question.startswith("what is the ") and question.endswith("?\nAnswer:")
        assert question.split(" of ", 1)[1][:-9] in names
    assert len({s.prompt for s in specs}) > 6


def test_shared_prefix_groups_share_their_system_prompt_and_are_shuffled() -> None:
    workload = build_workload("shared-prefix", num_groups=4, prompts_per_group=5)
    specs = workload.start()
    assert len(specs) == 20
    groups: dict[str, list[str]] = {}
    for s in specs:
        groups.setdefault(s.group, []).append(s.prompt)
    assert len(groups) == 4
    systems = {}
    for group, prompts in groups.items():
        system = prompts[0].split("\n\n")[0]
        assert all(p.startswith(system + "\n\n") for p in prompts)
        assert len(set(prompts)) == 5
        systems[group] = system
    assert len(set(systems.values())) == 4
    assert len(systems[specs[0].group].split()) > 150
    assert [s.group for s in specs] != sorted(s.group for s in specs)  # interleaved


def test_random_prompts_share_no_first_word() -> None:
    specs = build_workload("random", num_requests=200).start()
    first_words = [s.prompt.split()[0] for s in specs]
    assert len(set(first_words)) == 200
    assert all(a.prompt != b.prompt for a, b in zip(specs, specs[1:], strict=False))


def test_random_prompts_stay_distinct_beyond_the_word_list() -> None:
    specs = build_workload("random", num_requests=1500, prompt_words=4).start()
    assert len({s.prompt.split()[0].lower() for s in specs}) == 1500


def test_request_spec_needs_exactly_one_of_prompt_and_messages() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        RequestSpec(request_id="x", max_tokens=4)
    with pytest.raises(ValueError, match="exactly one"):
        RequestSpec(request_id="x", max_tokens=4, prompt="a", messages=[])


def test_unknown_workload_names_the_choices() -> None:
    with pytest.raises(ValueError, match="few-shot"):
        build_workload("nope")
