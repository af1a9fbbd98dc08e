"""`prefixserve simulate` from the command line: exit codes, the table, the JSON file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prefixserve.entrypoints.cli import main
from prefixserve.simulator.word_tokenizer import WordTokenizer


def test_simulate_returns_zero_and_writes_one_object_per_policy(tmp_path, capsys):
    out = tmp_path / "sim.json"
    rc = main(["simulate", "--workers", "4", "--policy", "round_robin", "--policy", "cache_aware",
               "--workload", "shared-prefix", "--requests", "64", "--seed", "1",
               "--shared-prefix-system-prompt-words", "48", "--out", str(out)])
    assert rc == 0
    results = json.loads(out.read_text())
    assert [r["policy"] for r in results] == ["round_robin", "cache_aware"]
    for r in results:
        assert r["workers"] == 4 and r["completed"] == 64
        assert 0.0 < r["hit_rate"] < 1.0
        assert r["load_imbalance"] >= 1.0
        assert r["throughput"]["requests_per_s"] > 0 and r["throughput"]["output_tokens_per_s"] > 0
        assert set(r["ttft_ms"]) >= {"p50", "p90", "p99"}
        assert r["ttft_ms"]["p50"] <= r["ttft_ms"]["p90"] <= r["ttft_ms"]["p99"]
    table = capsys.readouterr().out
    assert "round_robin" in table and "cache_aware" in table and "hit rate" in table


def test_cost_model_and_policy_flags_reach_the_run(tmp_path):
    out = tmp_path / "sim.json"
    rc = main(["simulate", "--workers", "2", "--policy", "cache_aware", "--requests", "16",
               "--step-overhead-ms", "7", "--prefill-ms-per-token", "0",
               "--cache-threshold", "0.9", "--request-rate", "5", "--out", str(out)])
    assert rc == 0
    [r] = json.loads(out.read_text())
    assert r["cost_model"]["step_overhead_ms"] == 7.0
    assert r["ttft_ms"]["p50"] >= 7.0


def test_bad_arguments_exit_2():
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--workers", "0", "--requests", "4"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--policy", "no_such_policy"])
    assert e.value.code == 2


def test_python_m_prefixserve_simulator_runs():
    proc = subprocess.run([sys.executable, "-m", "prefixserve.simulator", "--workers", "2",
                           "--policy", "least_load", "--requests", "8"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "least_load" in proc.stdout


def test_chat_turn_tokens_extend_the_previous_prompt_and_answer():
    tok = WordTokenizer()
    turn0 = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    answer = "hello friend"
    turn1 = turn0 + [{"role": "assistant", "content": answer}, {"role": "user", "content": "more"}]
    prefix = tok.encode_chat(turn0) + tok.encode_answer(answer.split(), chat=True)
    assert tok.encode_chat(turn1)[:len(prefix)] == prefix
    assert tok.encode("one two one") == [tok.encode("one")[0], tok.encode("two")[0],
                                         tok.encode("one")[0]]
