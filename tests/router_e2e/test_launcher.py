"""`launch_data_parallel` as `prefixserve serve --dp-size N` runs it, in a subprocess: a worker
that cannot start ends the launch with status 1 and a message; SIGTERM stops the router and
every worker with status 0; a launcher killed outright leaves no orphan worker behind.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

WORKER_ARGS = ["--max-num-seqs", "8", "--num-kv-blocks", "64", "--max-model-len", "512",
               "--log-level", "warning", "--log-interval", "0"]  # fmt: skip


def free_port_run(n: int) -> int:
    """A port P with P .. P+n-1 all free on 127.0.0.1, below the kernel's ephemeral range
    (32768+), so no outgoing connection can take one between this check and the bind."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - n)
        socks = [socket.socket() for _ in range(n)]
        try:
            for i, sock in enumerate(socks):
                sock.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no run of free ports")


def launch(dp_size: int, port: int, worker_args: list[str]) -> subprocess.Popen:
    code = ("import sys; from prefixserve.router.launcher import launch_data_parallel; "
            "sys.exit(launch_data_parallel(int(sys.argv[1]), 'round_robin', '127.0.0.1', "
            "int(sys.argv[2]), sys.argv[3:], {}))")  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", code, str(dp_size), str(port), *worker_args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def router_up(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_worker_that_fails_to_start_ends_the_launch_with_status_1():
    port = free_port_run(3)
    proc = launch(2, port, ["--no-such-flag"])
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "exited with status 2 during start" in err
    assert not router_up(f"http://127.0.0.1:{port}")


def test_sigterm_stops_router_and_every_worker():
    port = free_port_run(3)
    proc = launch(2, port, WORKER_ARGS)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: router_up(url) or proc.poll() is not None, 180), "no router"
        if proc.poll() is not None:
            pytest.fail(f"the launcher exited with {proc.returncode}: {proc.communicate()[1][-2000:]}")
        workers = httpx.get(url + "/workers", timeout=10).json()["workers"]
        assert [w["url"] for w in workers] == [f"http://127.0.0.1:{port + 1}",
                                               f"http://127.0.0.1:{port + 2}"]  # fmt: skip
        pids = children(proc.pid)
        assert len(pids) == 2
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert not any(alive(p) for p in pids)
        assert not router_up(url)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_killed_launcher_leaves_no_orphan_worker():
    port = free_port_run(2)
    proc = launch(1, port, WORKER_ARGS)
    try:
        assert wait_for(lambda: router_up(f"http://127.0.0.1:{port}"), 180), "no router"
        (worker,) = children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        assert wait_for(lambda: not alive(worker), 30), "the worker outlived its launcher"
    finally:
        if proc.poll() is None:
            proc.kill()
