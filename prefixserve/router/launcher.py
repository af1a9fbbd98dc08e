"""Data parallelism in one command: N `prefixserve serve` worker processes behind one router.

`launch_data_parallel(...)` is what `prefixserve serve --dp-size N` runs: it starts worker `i` as
`python -m prefixserve serve <worker_args> --host 127.0.0.1 --port PORT+1+i` (the workers sit on
the loopback interface, on the ports right after the router's), waits until every `/health`
answers 200, then serves the router on `host:port` in this process until Ctrl-C or SIGTERM.
`DataParallelCluster` is the same thing as a context manager, for tests and benchmarks.

Each worker runs in its own session (process group), so stopping one stops everything it
spawned, and each asks the kernel for SIGTERM if its launcher dies (Linux), so a killed launcher
leaves no orphans. A worker that dies during start stops the whole cluster with a message; one
that dies later is only reported (the router retries its requests elsewhere). Unless the
environment says otherwise, each worker gets `cpu_count // N` intra-op threads, so N workers
do not oversubscribe the CPU. The launcher knows nothing about the engine's flags: it passes
`worker_args` through untouched, reading only `--model` to give the `kv_events` policy a
tokenizer.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

from prefixserve.router.app import RouterServer
from prefixserve.router.cli import run_router_in_process

logger = logging.getLogger(__name__)

WORKER_HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


class WorkerStartError(RuntimeError):
    """A worker exited or never became healthy while the cluster was starting."""


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGTERM when the launcher goes away.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port(host: str = WORKER_HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class WorkerProcess:
    """One `prefixserve serve` subprocess, leader of its own process group."""

    def __init__(
        self,
        index: int,
        port: int,
        worker_args: list[str],
        env: dict[str, str],
        log_file: Path | None = None,
    ) -> None:
        self.index, self.port = index, port
        self.url = f"http://{WORKER_HOST}:{port}"
        self.log_file = log_file
        cmd = [
            sys.executable,
            "-m",
            "prefixserve",
            "serve",
            *worker_args,
            "--host",
            WORKER_HOST,
            "--port",
            str(port),
        ]
        self._log: IO[bytes] | None = open(log_file, "wb") if log_file else None  # noqa: SIM115
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def healthy(self, client: httpx.Client) -> bool:
        try:
            return client.get(self.url + "/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the worker's process group, SIGKILL it after `grace_s`."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "worker %d (pid %d) ignored SIGTERM; killing it", self.index, self.pid
                )
        self.signal_group(signal.SIGKILL)  # also reaps any grandchild left in the group
        self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n: int = 20) -> str:
        if self.log_file is None or not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-n:])


def worker_env(dp_size: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The workers' environment: intra-op threads split among them unless already set."""
    env = dict(os.environ if base is None else base)
    threads = str(max(1, (os.cpu_count() or 1) // dp_size))
    env.setdefault("OMP_NUM_THREADS", threads)
    env.setdefault("MKL_NUM_THREADS", env["OMP_NUM_THREADS"])
    return env


def model_tokenizer_path(worker_args: list[str]) -> str | None:
    """What the router's `kv_events` policy should tokenize text prompts with: the workers'
    `--model` directory, or the default model's; None for a .gguf model."""
    model = None
    for i, arg in enumerate(worker_args):
        if arg == "--model" and i + 1 < len(worker_args):
            model = worker_args[i + 1]
        elif arg.startswith("--model="):
            model = arg.split("=", 1)[1]
    if model is None:
        from prefixserve.loader.default_model import default_model_dir

        return str(default_model_dir())
    return model if Path(model).is_dir() else None


class DataParallelCluster:
    """N workers and a router in front; `with DataParallelCluster(3, ["--max-num-seqs", "8"])
    as c: httpx.post(c.url + "/v1/completions", ...)`.

    `port=0` puts the router and the workers on free ports; otherwise the router takes `port`
    and worker `i` takes `port + 1 + i`. `log_dir` captures each worker's output in
    `worker-i.log` (default: the launcher's own stdout/stderr).
    """

    def __init__(
        self,
        dp_size: int,
        worker_args: list[str] | None = None,
        router_policy: str = "cache_aware",
        host: str = "127.0.0.1",
        port: int = 0,
        router_options: dict[str, Any] | None = None,
        log_dir: str | Path | None = None,
        startup_timeout_s: float = 600.0,
        start_router: bool = True,
    ) -> None:
        if dp_size < 1:
            raise ValueError(f"--dp-size must be >= 1, got {dp_size}")
        self.dp_size = dp_size
        self.worker_args = list(worker_args or [])
        self.router_policy = router_policy
        self.host, self.port = host, port
        self.router_options = dict(router_options or {})
        self.log_dir = Path(log_dir) if log_dir else None
        self.startup_timeout_s = startup_timeout_s
        self.start_router = start_router
        self.env = worker_env(dp_size)
        self.workers: list[WorkerProcess] = []
        self.router: RouterServer | None = None

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> DataParallelCluster:
        try:
            for i in range(self.dp_size):
                self.spawn_worker(self.port + 1 + i if self.port else None)
            self.wait_healthy(self.workers)
            if self.start_router:
                self.router = self._start_router()
        except BaseException:
            self.stop()
            raise
        return self

    def spawn_worker(self, port: int | None = None) -> WorkerProcess:
        """Start one more worker process (not yet known to the router; `wait_healthy` it and
        `POST /workers` to add it at runtime)."""
        index = len(self.workers)
        log = self.log_dir / f"worker-{index}.log" if self.log_dir else None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        worker = WorkerProcess(index, port or free_port(), self.worker_args, self.env, log)
        self.workers.append(worker)
        logger.info("started worker %d (pid %d) on %s", index, worker.pid, worker.url)
        return worker

    def wait_healthy(self, workers: list[WorkerProcess]) -> None:
        """Block until each worker answers `/health` with 200; WorkerStartError if one exits
        or the startup timeout passes."""
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(workers)
        with httpx.Client() as client:
            while pending:
                for w in list(pending):
                    code = w.exit_code()
                    if code is not None:
                        tail = w.log_tail()
                        raise WorkerStartError(
                            f"worker {w.index} ({w.url}) exited with status "
                            f"{code} during start" + (f":\n{tail}" if tail else "")
                        )
                    if w.healthy(client):
                        pending.remove(w)
                if pending and time.monotonic() > deadline:
                    urls = ", ".join(w.url for w in pending)
                    raise WorkerStartError(
                        f"workers not healthy after {self.startup_timeout_s:.0f} s: {urls}"
                    )
                if pending:
                    time.sleep(0.2)

    def _start_router(self) -> RouterServer:
        options = dict(self.router_options)
        if self.router_policy == "kv_events" and not options.get("tokenizer"):
            options["tokenizer"] = model_tokenizer_path(self.worker_args)
        return run_router_in_process(
            self.worker_urls, policy=self.router_policy, host=self.host, port=self.port, **options
        )

    def stop(self) -> None:
        """Stop the router, then every worker (SIGTERM to all at once, then wait)."""
        if self.router is not None:
            self.router.stop()
            self.router = None
        for w in self.workers:
            if w.exit_code() is None:
                w.signal_group(signal.SIGTERM)
        for w in self.workers:
            w.stop()

    def __enter__(self) -> DataParallelCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # access -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self.router is None:
            raise RuntimeError("the cluster has no router running")
        return self.router.url

    @property
    def worker_urls(self) -> list[str]:
        return [w.url for w in self.workers]

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` and its process group at once, as a crash would."""
        worker = self.workers[index]
        worker.signal_group(signal.SIGKILL)
        worker.proc.wait()

    def dead_workers(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.exit_code() is not None]


class _Shutdown(Exception):
    pass


def _raise_shutdown(signum: int, frame: Any) -> None:
    raise _Shutdown(signal.Signals(signum).name)


def launch_data_parallel(
    dp_size: int,
    router_policy: str,
    host: str,
    port: int,
    worker_args: list[str],
    router_options: dict[str, Any],
) -> int:
    """Run N workers on ports `port+1 .. port+N` (127.0.0.1) and the router on `host:port`
    until Ctrl-C or SIGTERM; the exit status: 0 after a requested stop, 1 if a worker failed
    to start or every worker died."""
    if port == 0:
        raise ValueError("--port must be a fixed port with --dp-size (workers use port+1..port+N)")
    if port + dp_size > 65535:
        raise ValueError(f"--port {port} leaves no room for {dp_size} workers after it")
    previous = {s: signal.signal(s, _raise_shutdown) for s in (signal.SIGTERM, signal.SIGINT)}
    cluster = DataParallelCluster(dp_size, worker_args, router_policy, host, port, router_options)
    try:
        cluster.start()
        print(
            f"prefixserve: router ({router_policy}) on http://{host}:{port} over "
            f"{dp_size} workers: {' '.join(cluster.worker_urls)}",
            file=sys.stderr,
            flush=True,
        )
        return _watch(cluster)
    except WorkerStartError as e:
        print(f"prefixserve serve: error: {e}", file=sys.stderr, flush=True)
        return 1
    except (_Shutdown, KeyboardInterrupt):
        print("prefixserve: shutting down the router and workers", file=sys.stderr, flush=True)
        return 0
    finally:
        # Ignore further Ctrl-C while the workers stop, so none is left behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(cluster: DataParallelCluster) -> int:
    """Sleep until interrupted, reporting workers that die; 1 once none is left."""
    reported: set[int] = set()
    while True:
        time.sleep(1.0)
        for w in cluster.dead_workers():
            if w.index not in reported:
                reported.add(w.index)
                print(
                    f"prefixserve: worker {w.index} ({w.url}) exited with status "
                    f"{w.exit_code()}; the router sends its requests elsewhere",
                    file=sys.stderr,
                    flush=True,
                )
        if len(reported) == len(cluster.workers):
            print("prefixserve serve: error: every worker exited", file=sys.stderr, flush=True)
            return 1
