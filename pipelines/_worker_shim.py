"""The command Beam runs for a warm worker (:mod:`pipelines.workers`).

It hands this process's environment (Beam's control and logging addresses,
the pipeline options) and standard streams to the build's zygote over its
Unix socket, waits while the zygote's forked child runs the worker, and
exits with the worker's status. Killing this process kills the worker.
Where no zygote answers (it failed to start), this process becomes Beam's
own worker instead. Standard library only, and small: it runs as
``python -I -S``.
"""

import json
import os
import socket
import sys


def main(path: str) -> int:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:  # no zygote: start as Beam would (site packages and all)
        worker = [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"]
        os.execv(sys.executable, worker)
    environ = json.dumps(dict(os.environ)).encode()
    socket.send_fds(connection, [len(environ).to_bytes(8, "big")], [0, 1, 2])
    connection.sendall(environ)
    status = b""
    while chunk := connection.recv(64):
        status += chunk
    if not status:
        print("corpora: a warm worker ended without a status", file=sys.stderr)
        return 1
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
