"""`prefixserve serve` as a user runs it: a subprocess on an ephemeral port, no other flags."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytestmark = pytest.mark.slow


def test_serve_starts_on_the_default_model_and_logs_status() -> None:
    cmd = [sys.executable, "-m", "prefixserve", "serve", "--host", "127.0.0.1", "--port", "0",
           "--log-interval", "0.5", "--num-kv-blocks", "256"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"running on (http://127\.0\.0\.1:\d+)", line, re.IGNORECASE)
            url = m.group(1) if m else None
        assert url, "server did not start:\n" + "".join(lines)
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.get("/health").status_code == 200
            assert http.get("/v1/models").json()["data"][0]["id"] == "SmolLM2-135M-Instruct"
            reply = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "temperature": 0})
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
        while not any("prefix cache hit rate" in s for s in lines) and time.monotonic() < deadline:
            lines.append(proc.stdout.readline())
        status = next(s for s in lines if "prefix cache hit rate" in s)
        assert "running:" in status and "waiting:" in status and "KV usage" in status
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_rejects_bad_flags_with_status_2() -> None:
    out = subprocess.run([sys.executable, "-m", "prefixserve", "serve", "--max-n", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--max-n" in out.stderr


def test_serve_dp_size_starts_workers_behind_a_router() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "prefixserve", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--dp-size", "2", "--router-policy", "round_robin", "--num-kv-blocks", "128",
           "--max-model-len", "512", "--log-interval", "0", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url, deadline, healthy = f"http://127.0.0.1:{port}", time.monotonic() + 180, False
        with httpx.Client(base_url=url, timeout=60) as http:
            while not healthy and time.monotonic() < deadline and proc.poll() is None:
                try:
                    healthy = http.get("/health").status_code == 200
                except httpx.TransportError:
                    time.sleep(0.5)
            assert healthy, f"router did not come up (exit {proc.poll()})"
            for _ in range(2):
                reply = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "temperature": 0})
                assert reply.status_code == 200, reply.text
                assert "cached_tokens" in reply.json()["usage"]["prompt_tokens_details"]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
