"""Local worker processes that start warm.

Beam's DirectRunner starts each worker of a multi-process build, once the
pipeline runs, as a new Python (``python -m
apache_beam.runners.worker.sdk_worker_main``) that imports Beam, corpora and
their dependencies before its first bundle: 2.3 s here with every extra
installed, 1.3 s with the default install, on every build, after the
launcher has spent as long on its own imports.

A build on two or more local workers instead starts a *zygote* as its first
step (:class:`Zygote`): a Python that does those imports while the launcher
does its own and builds the pipeline, then waits on a Unix socket. Beam's
worker command becomes :mod:`pipelines._worker_shim`, a standard-library
script (``python -I -S``, a few milliseconds) that hands the zygote its
environment and standard streams; the zygote forks, the child runs Beam's
worker main with them, and the script exits with the worker's status. Beam
sees an ordinary worker process; killing the script kills the worker. A
build that scores with CLIP has the zygote import torch and open_clip as
well (:meth:`Zygote.preload`), beside the launcher's check of the model. The
zygote has run no pipeline (no gRPC state is forked), allocates with
malloc's defaults (:mod:`pipelines.memory` is the launcher's), waits for
its workers (so their CPU time counts in the launcher's children's, as
before), and exits when the launcher closes its standard input, or dies.

Where the zygote is gone (it failed to start), the script starts Beam's own
worker instead: a build only loses the head start. ``CORPORA_WORKERS=spawn``
turns warm workers off; they are used on Linux only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from pipelines.runners import RunnerSettings

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker_shim.py")
BEAM_WORKER = "-m apache_beam.runners.worker.sdk_worker_main"  # the end of Beam's command
# What a worker needs before its first bundle, imported by the zygote once
PRELOAD = ("apache_beam.runners.worker.sdk_worker_main", "pipelines.build", "pipelines.store")


def wanted(runner: RunnerSettings) -> bool:
    """Whether a build on ``runner`` starts warm workers: a DirectRunner
    build on more than one worker process, on Linux, unless
    ``CORPORA_WORKERS=spawn`` or the Beam options choose the running mode.

    >>> from pipelines.runners import RunnerSettings
    >>> portable = RunnerSettings("PortableRunner", 4, job_endpoint="localhost:8099")
    >>> wanted(RunnerSettings(workers=1)), wanted(portable)
    (False, False)
    """
    return (
        runner.runner == "DirectRunner"
        and runner.workers > 1
        and sys.platform.startswith("linux")
        and os.environ.get("CORPORA_WORKERS") != "spawn"
        and not runner.chose_running_mode
    )


@contextlib.contextmanager
def warm_workers(runner: RunnerSettings, verbose: bool = False) -> Iterator["Zygote | None"]:
    """A :class:`Zygote` for a build on ``runner`` where :func:`wanted`, closed
    when the block ends; ``None`` otherwise, and where one cannot start (no
    temporary folder, a socket path too long): the build then starts Beam's
    own workers."""
    zygote = None
    if wanted(runner):
        try:
            zygote = Zygote(verbose)
        except OSError as exc:
            logging.getLogger(__name__).info("warm workers are off: %s", exc)
    try:
        yield zygote
    finally:
        if zygote is not None:
            zygote.close()


class Zygote:
    """The build's zygote process; :attr:`command` is the worker command
    Beam runs in its place (:func:`set_worker_command`). Close it (or leave
    its ``with`` block) when the build ends."""

    def __init__(self, verbose: bool = False):
        self._folder = tempfile.mkdtemp(prefix="corpora-workers-")
        self.path = os.path.join(self._folder, "zygote.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # bound before the zygote starts: a worker that asks early waits in the backlog
            listener.bind(self.path)
            listener.listen(64)
            self._process = subprocess.Popen(
                [sys.executable, "-m", "pipelines.workers", str(listener.fileno())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,  # a line once its imports are done
                stderr=None if verbose else subprocess.DEVNULL,
                pass_fds=[listener.fileno()],
            )
        except BaseException:
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        finally:
            listener.close()  # the zygote's is the only one: once it is gone, workers see it

    def preload(self, *modules: str) -> None:
        """Have the zygote import ``modules`` too before it forks a worker
        (a build's CLIP stage: torch and open_clip)."""
        if self._process.poll() is None:
            try:
                self._process.stdin.write((" ".join(modules) + "\n").encode())
                self._process.stdin.flush()
            except BrokenPipeError:  # it is gone: the workers start as Beam's own
                pass

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def exited(self) -> bool:
        return self._process.poll() is not None

    @property
    def command(self) -> str:
        return shlex.join([sys.executable, "-I", "-S", SHIM, self.path])

    def close(self) -> None:
        """Stop the zygote: at once if it is still importing (the build
        needed no workers after all); otherwise once it has waited for its
        workers, which are done when the pipeline is."""
        if self._process.poll() is None:
            if not select.select([self._process.stdout], [], [], 0)[0]:  # no "ready" yet
                self._process.kill()
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        for stream in (self._process.stdin, self._process.stdout):
            stream.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> "Zygote":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def set_worker_command(pipeline_proto, command: str):
    """``pipeline_proto`` (Beam's runner API) with Beam's own worker command
    replaced by ``command`` in its process environments."""
    from apache_beam.portability import python_urns

    for environment in pipeline_proto.components.environments.values():
        # the payload of a subprocess environment is its command line
        if environment.urn == python_urns.SUBPROCESS_SDK and environment.payload.decode(
            "utf-8"
        ).endswith(BEAM_WORKER):
            environment.payload = command.encode("utf-8")
    return pipeline_proto


# ------------------------------------------------------------ the zygote's side


def serve(listener_fd: int) -> None:
    """The zygote: import what workers need, then fork one per request on
    the socket until standard input closes; a line there names more modules
    to import (:meth:`Zygote.preload`)."""
    listener = socket.socket(fileno=listener_fd)
    for module in PRELOAD:
        __import__(module)
    print("ready", flush=True)
    workers: set[int] = set()
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        _reap(workers)
        if sys.stdin in ready:
            line = sys.stdin.readline()
            if not line:  # the launcher closed it, or is gone
                _reap(workers, block=True)
                return
            for module in line.split():
                __import__(module)
            continue
        if not ready:
            continue
        connection, _ = listener.accept()
        try:
            environ, fds = _receive(connection)
        except (OSError, ValueError):
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            _work(connection, environ, fds)  # does not return
        workers.add(pid)
        connection.close()
        for fd in fds:
            os.close(fd)


def _reap(workers: set[int], block: bool = False) -> None:
    """Wait for finished workers: their CPU time then counts in this
    process's children's, and so in the launcher's (what ``time`` and the
    benchmarks report)."""
    for pid in list(workers):
        done, _ = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done:
            workers.discard(pid)


def _receive(connection: socket.socket) -> tuple[dict[str, str], list[int]]:
    """A worker request: the script's environment and its standard streams."""
    header, fds, _, _ = socket.recv_fds(connection, 8, 3)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("a worker request without its standard streams")
    payload = bytearray(header)
    while len(payload) < 8 or len(payload) < 8 + int.from_bytes(payload[:8], "big"):
        chunk = connection.recv(1 << 20)
        if not chunk:
            for fd in fds:
                os.close(fd)
            raise ValueError("a worker request cut short")
        payload += chunk
    return json.loads(payload[8:]), fds


def _work(connection: socket.socket, environ: dict[str, str], fds: list[int]) -> None:
    """A forked worker: take the script's streams and environment, run
    Beam's worker main, send the status back, exit."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(environ)
        threading.Thread(target=_exit_without, args=(connection,), daemon=True).start()
        from apache_beam.runners.worker import sdk_worker_main

        sdk_worker_main.main([])
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            connection.sendall(str(code).encode())
        except OSError:
            pass
        os._exit(code)


def _exit_without(connection: socket.socket) -> None:
    """End this worker when the script that stands for it is gone (Beam killed it)."""
    try:
        while connection.recv(64):
            pass
    except OSError:
        pass
    os._exit(1)


def main(argv: list[Any]) -> None:
    serve(int(argv[1]))


if __name__ == "__main__":
    main(sys.argv)
