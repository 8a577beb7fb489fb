"""Real services for the scale tests, each started on a free loopback port in a temporary directory and stopped
afterwards: a Ray cluster (`ray start --head`), `redis-server`, and PostgreSQL (Debian's `initdb`/`pg_ctl`, run as
the `postgres` user when the tests run as root, since PostgreSQL refuses to run as root). scripts/setup.sh installs
them; where one truly cannot be had, the test skips with the reason."""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from servers import processes

from maestro_graph.doors.serve.loopback import free_port

_UP_TIMEOUT_S = 60.0


def _wait(ready, what: str, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    deadline = time.monotonic() + _UP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-2000:] if log else ''}")
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {_UP_TIMEOUT_S:.0f} s")


def _stop(proc: subprocess.Popen, grace_s: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """`sig` to the service's own process group (the service and the children it started), then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def ray_env() -> dict[str, str]:
    """Token authentication (on by default for Ray clusters since 2.59) with a token made for this test run: the
    cluster and every client of it get it through the environment, as an operator's would."""
    token = os.environ.get("MAESTRO_TEST_RAY_TOKEN") or secrets.token_hex(16)
    os.environ["MAESTRO_TEST_RAY_TOKEN"] = token
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0",
            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))}


def _need_ray() -> None:
    if importlib.util.find_spec("ray") is None:  # not imported here: Ray reads its token settings on import
        pytest.skip("the `ray` extra is not installed (pip install -e '.[ray]')")


@dataclass(frozen=True)
class _RayNode:
    """A `ray start` node on loopback: its arguments, the command it runs under and its working directory."""

    args: list[str]
    wrap: list[str] = field(default_factory=list)
    cwd: Path | None = None


@contextlib.contextmanager
def _ray_nodes(*nodes: _RayNode) -> Iterator[list[subprocess.Popen]]:
    """`ray start --block` nodes started at once (a worker node waits for its head by itself), each in its own
    temporary directory and session (so a test can take a node away: `kill_node`); yields their processes; stopped
    and removed afterwards."""
    started: list[tuple[subprocess.Popen, str, Path]] = []
    try:
        for node in nodes:
            temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
            log = Path(temp) / "start.log"
            with log.open("w") as fh:
                started.append((subprocess.Popen(
                    [*node.wrap, str(Path(sys.executable).parent / "ray"), "start", "--block", *node.args,
                     "--disable-usage-stats", "--node-ip-address=127.0.0.1", f"--temp-dir={temp}"],
                    env={**os.environ, **ray_env()}, cwd=node.cwd, stdout=fh, stderr=subprocess.STDOUT,
                    start_new_session=True), temp, log))
        for proc, _, log in started:
            _wait(lambda log=log: "Ray runtime started" in log.read_text(), "ray start", proc, log)
        yield [proc for proc, _, _ in started]
    finally:
        for proc, temp, _ in reversed(started):
            _stop(proc, grace_s=2.0)  # a throw-away cluster: no state worth a clean shutdown
            shutil.rmtree(temp, ignore_errors=True)


def _head(port: int, num_cpus: int) -> _RayNode:
    return _RayNode(["--head", f"--port={port}", f"--num-cpus={num_cpus}", "--include-dashboard=false"])


@contextlib.contextmanager
def ray_cluster(num_cpus: int = 2) -> Iterator[str]:
    """A one-node Ray cluster of `num_cpus` logical CPUs; yields its address (HOST:PORT)."""
    _need_ray()
    port = free_port()
    with _ray_nodes(_head(port, num_cpus)):
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def ray_two_nodes(hidden: Path, workdir: Path, worker_cpus: int = 2, read_only: Path | None = None) -> Iterator[str]:
    """A head node without CPUs, so every actor runs on the second node: that one starts in `workdir` and cannot
    see `hidden` (in its own mount namespace an empty tmpfs covers the folder, as if it were on another machine's
    disk), and sees `read_only` (when given) as a read-only folder. Yields the head's address; skips where mount
    namespaces are not allowed."""
    _need_ray()
    wrap = ["unshare", "--mount", "--propagation", "private", *([] if os.geteuid() == 0 else ["--map-root-user"])]
    ro = read_only or hidden  # without one, the hidden folder is remounted read-only under its tmpfs: harmless
    script = ('mount -t tmpfs hidden "$1" && mount --bind "$2" "$2" && mount -o remount,bind,ro "$2" && shift 2 '
              '&& exec "$@"')
    probe = subprocess.run([*wrap, "sh", "-c", script, "sh", str(hidden), str(ro), "true"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot hide a folder from a second Ray node here (unshare/mount: {probe.stderr.strip()})")
    port = free_port()
    hide = [*wrap, "sh", "-c", script, "sh", str(hidden), str(ro)]
    with _ray_nodes(_head(port, 0), _RayNode([f"--address=127.0.0.1:{port}", f"--num-cpus={worker_cpus}"], hide,
                                             workdir)):
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def ray_node(address: str, num_cpus: int) -> Iterator[subprocess.Popen]:
    """One more node of `num_cpus` CPUs joining the cluster at `address`; yields its `ray start` process, whose
    session is the node (raylet, workers): `kill_node` takes it away."""
    with _ray_nodes(_RayNode([f"--address={address}", f"--num-cpus={num_cpus}"])) as (proc,):
        yield proc


def kill_node(proc: subprocess.Popen) -> None:
    """SIGKILL every process of a node's session at once, as a machine that loses power: Ray puts each worker in a
    process group of its own, so killing the node's group would leave its workers running until they notice."""
    for pid in session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def session_pids(session: int, title: bytes = b"") -> set[int]:
    """The live processes of a session (`servers.processes`) whose command line holds `title`."""
    def titled(pid: int) -> bool:
        try:
            return title in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # it exited since
            return False

    return {pid for pid, (_, sid) in processes().items() if sid == session and titled(pid)}


@contextlib.contextmanager
def redis_server(folder: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """`redis-server` without persistence on `port` (default: a free one); yields (redis:// URL, process) so a test
    can stop it mid-run, and bring it back on the same port with a second `redis_server`."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it with apt-get)")
    redis = pytest.importorskip("redis", reason="the `redis` extra is not installed (pip install -e '.[redis]')")
    port = port or free_port()
    log = folder / "redis.log"
    with log.open("a") as fh:
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(folder), "--daemonize", "no"],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait(lambda: redis.Redis.from_url(url).ping(), "redis-server", proc, log)
        yield url, proc
    finally:
        _stop(proc)


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class Postgres:
    """A throw-away PostgreSQL cluster (trust authentication, loopback only) at `url`; `stop` and `start` take it
    away and bring it back on the same port with the same data, as a database failover would."""

    def __init__(self, bin_dir: Path, temp: Path, as_user: list[str], port: int):
        self.bin_dir, self.temp, self.as_user = bin_dir, temp, as_user
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self.port = port
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import psycopg

        log = self.temp / "postgres.log"
        self.proc = subprocess.Popen([*self.as_user, str(self.bin_dir / "postgres"), "-D", str(self.temp / "data"),
                                      "-p", str(self.port), "-k", str(self.temp), "-c", "listen_addresses=127.0.0.1",
                                      "-c", "fsync=off"],
                                     stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)
        _wait(lambda: psycopg.connect(self.url, connect_timeout=2).close() is None, "postgres", self.proc, log)

    def stop(self) -> None:
        """A fast shutdown (SIGINT; SIGTERM would wait for the clients to leave): every connection is cut."""
        if self.proc is not None:
            _stop(self.proc, sig=signal.SIGINT)


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    """A started Postgres (see the class); removed afterwards."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (scripts/setup.sh installs Debian's postgresql with apt-get)")
    pytest.importorskip("langgraph.checkpoint.postgres",
                        reason="the `postgres` extra is not installed (pip install -e '.[postgres]')")
    temp = Path(tempfile.mkdtemp(prefix="pg", dir="/tmp"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as the unprivileged `postgres` user
        user = pwd.getpwnam("postgres")
        os.chown(temp, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(temp / "data"), "-U", "postgres", "--auth=trust",
                    "--no-sync"], check=True, capture_output=True)
    server = Postgres(bin_dir, temp, as_user, free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(temp, ignore_errors=True)
