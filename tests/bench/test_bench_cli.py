"""`prefixserve bench` end to end against a live OpenAI-compatible HTTP server.

Tests taking `bench_base_url` run against any compatible server (the fake one by default,
a real one with PREFIXSERVE_BENCH_BASE_URL); those taking `make_fake_server` need the fake
one's fault injection or its record of what it received.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prefixserve.bench.cli import main

SUMMARY_KEYS = {"workload", "num_requests", "ttft_ms", "tpot_ms", "e2e_ms", "request_throughput",
                "output_throughput", "cached_token_ratio", "errors"}  # fmt: skip


def bench(base_url: str, workload: str, out: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    argv = ["--base-url", base_url, "--workload", workload, "--out", str(out), "--no-progress",
            "--num-requests", "12", "--max-tokens", "4", *extra]  # fmt: skip
    code = main(argv)
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_few_shot_run_reports_every_field_and_cache_hits(
    bench_base_url: str, tmp_path: Path, capsys: Any
) -> None:
    code, report = bench(bench_base_url, "few-shot", tmp_path / "fs.json", "--concurrency", "1")
    assert code == 0
    assert SUMMARY_KEYS <= report.keys()
    assert report["workload"] == "few-shot" and report["num_requests"] == 12
    assert report["completed"] == 12 and report["errors"]["count"] == 0
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        stats = report[key]
        assert 0 < stats["p50"] <= stats["p90"] <= stats["p99"]
    assert report["ttft_ms"]["p50"] <= report["e2e_ms"]["p50"]
    assert report["request_throughput"] > 0 and report["output_throughput"] > 0
    assert report["cached_token_ratio"] > 0.5  # the header is most of every prompt
    assert len(report["requests"]) == 12
    stdout_line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stdout_line["workload"] == "few-shot" and "requests" not in stdout_line


def test_random_workload_gets_no_cache_hits(bench_base_url: str, tmp_path: Path) -> None:
    code, report = bench(bench_base_url, "random", tmp_path / "random.json")
    assert code == 0 and report["completed"] == 12
    assert report["cached_token_ratio"] == pytest.approx(0.0, abs=0.01)


@pytest.mark.parametrize("workload", ["self-consistency", "table-qa", "shared-prefix"])
def test_static_sharing_workloads_hit_the_cache(
    bench_base_url: str, tmp_path: Path, workload: str
) -> None:
    code, report = bench(bench_base_url, workload, tmp_path / "r.json")
    assert code == 0 and report["errors"]["count"] == 0
    assert report["cached_token_ratio"] > 0.3


def test_multi_turn_sends_the_real_answer_in_the_next_turn(
    make_fake_server: Any, tmp_path: Path
) -> None:
    server = make_fake_server()
    code, report = bench(server.base_url, "multi-turn", tmp_path / "mt.json", "--concurrency", "3")
    assert code == 0 and report["completed"] == 12
    assert all(body.get("messages") for body in server.bodies)
    assert {r["turn"] for r in report["requests"]} == {0, 1, 2, 3}
    later = [p for p in server.prompts if "assistant: " in p]
    assert len(later) == 9
    assert all("assistant:  tok0_0 tok0_1 tok0_2 tok0_3" in p for p in later)  # the streamed answer
    assert report["cached_token_ratio"] > 0.3


def test_tree_of_thought_children_hit_their_parents(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server()
    code, report = bench(server.base_url, "tree-of-thought", tmp_path / "tot.json",
                         "--num-requests", "14", "--tree-of-thought-branches", "2",
                         "--tree-of-thought-depth", "3")  # fmt: skip
    assert code == 0 and report["completed"] == 14  # two trees of 1 + 2 + 4
    children = [r for r in report["requests"] if r["turn"] > 0]
    assert all(r["cached_tokens"] > 0.5 * r["prompt_tokens"] for r in children)


def test_server_errors_are_reported_not_raised(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server(fail_every=3, fail_status=500)
    code, report = bench(server.base_url, "few-shot", tmp_path / "err.json", "--concurrency", "2")
    assert code == 0
    assert report["num_requests"] == 12 and report["completed"] == 8
    assert report["errors"]["count"] == 4
    assert report["errors"]["messages"][0].startswith("HTTP 500: injected failure")


def test_bad_request_errors_end_a_conversation_but_not_the_run(
    make_fake_server: Any, tmp_path: Path
) -> None:
    server = make_fake_server(fail_every=5, fail_status=400)
    code, report = bench(server.base_url, "multi-turn", tmp_path / "mt.json", "--concurrency", "2")
    assert code == 0
    assert report["errors"]["count"] >= 1
    assert all(m.startswith("HTTP 400") for m in report["errors"]["messages"])
    assert report["completed"] + report["errors"]["count"] == report["num_requests"] < 12


def test_all_requests_failing_exits_nonzero(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server(fail_every=1)
    code, report = bench(server.base_url, "random", tmp_path / "fail.json")
    assert code == 1 and report["completed"] == 0 and report["errors"]["count"] == 12


def test_server_without_usage_still_gets_latencies(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server(send_usage=False)
    code, report = bench(server.base_url, "few-shot", tmp_path / "nousage.json")
    assert code == 0 and report["completed"] == 12
    assert report["cached_token_ratio"] is None
    assert report["output_throughput"] > 0  # counted from streamed chunks
    assert report["ttft_ms"]["p50"] > 0


def test_unreachable_server_exits_nonzero(tmp_path: Path, capsys: Any) -> None:
    code = main(["--base-url", "http://127.0.0.1:9", "--workload", "random", "--no-progress"])
    assert code == 1
    assert "cannot reach" in capsys.readouterr().err


def test_request_rate_mode_and_chat_flag(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server()
    code, report = bench(server.base_url + "/v1", "shared-prefix", tmp_path / "rate.json",
                         "--request-rate", "200", "--chat", "--model", "fake-model")  # fmt: skip
    assert code == 0 and report["completed"] == 12
    assert report["request_rate"] == 200 and report["concurrency"] is None
    assert all(body["model"] == "fake-model" and "messages" in body for body in server.bodies)


def test_self_consistency_n_field_counts_all_samples(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server()
    code, report = bench(server.base_url, "self-consistency", tmp_path / "n.json",
                         "--self-consistency-use-n-field")  # fmt: skip
    assert code == 0 and report["num_requests"] == 1
    assert [b["n"] for b in server.bodies] == [12]
    assert report["total_output_tokens"] == 12 * 4
    assert report["tpot_ms"]["p50"] > 0


def test_compare_prints_a_side_by_side_table(
    bench_base_url: str, tmp_path: Path, capsys: Any
) -> None:
    bench(bench_base_url, "few-shot", tmp_path / "few.json")
    bench(bench_base_url, "random", tmp_path / "rand.json")
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "few.json"), str(tmp_path / "rand.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["metric", "few", "rand"]
    row = {line.split("  ")[0].strip(): line.split() for line in lines[2:]}
    assert row["workload"][-2:] == ["few-shot", "random"]
    assert "TTFT p99 (ms)" in row and "cached token ratio" in row


def test_compare_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    assert main(["--compare", str(tmp_path / "missing.json")]) == 2


def test_plot_writes_pngs(make_fake_server: Any, tmp_path: Path) -> None:
    server = make_fake_server()
    plots = tmp_path / "plots"
    code, _ = bench(server.base_url, "multi-turn", tmp_path / "mt.json", "--plot", str(plots))
    assert code == 0
    names = sorted(p.name for p in plots.glob("*.png"))
    assert names == ["cached_ratio.png", "ttft_cdf.png", "turn_ttft.png"]
    for png in plots.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_bench_runs_as_a_module_without_importing_torch() -> None:
    code = (
        "import runpy, sys\n"
        "sys.argv = ['prefixserve bench', '--help']\n"
        "try:\n"
        "    runpy.run_module('prefixserve.bench', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules, 'prefixserve.bench imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--workload" in proc.stdout and "--few-shot-num-examples" in proc.stdout
