"""The HTTP layer alone: corpora's pinned keep-alive pool against urllib3 and httpx.

    python benchmarks/http_clients.py                  # 4,000 GETs, 32 threads, no latency
    python benchmarks/http_clients.py --requests 2000 --threads 64 --latency 0.05

Why it exists: issue 27 asked whether the fetch should move onto a maintained
client (for proxies) or keep its own pool and learn proxies. Each side GETs
the same photo URLs (``benchmarks/fetch.py``'s server, its own process) from
``--threads`` threads over keep-alive connections to one host, reads every
body whole and does nothing else; the sides alternate ``--repeats`` times in
fresh processes, and the table gives the median requests per second and CPU
(user + system) milliseconds per request of each. corpora's side is
:func:`corpora.fetch.attempt.http_attempt`: the address guard, the pinned
connection and the streamed, capped read included.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SIDES = ("corpora", "urllib3", "httpx")


def _getter(side: str, threads: int):
    """A function GETting one URL and returning its body's length."""
    if side == "corpora":
        from corpora.fetch.attempt import http_attempt
        from corpora.fetch.connections import ConnectionPool, DnsCache, Proxies
        from corpora.fetch.settings import FetchSettings

        settings = FetchSettings(allow_private_urls=True)
        pool, dns = ConnectionPool(threads, Proxies()), DnsCache()
        return lambda url: len(http_attempt(url, settings, pool, dns).data or b"")
    if side == "urllib3":
        import urllib3

        manager = urllib3.PoolManager(maxsize=threads, retries=False)
        return lambda url: len(manager.request("GET", url).data)
    import httpx

    client = httpx.Client(limits=httpx.Limits(max_connections=threads), trust_env=False)
    return lambda url: len(client.get(url).content)


def one_side(side: str, port: int, requests: int, threads: int) -> dict:
    get = _getter(side, threads)
    urls = [f"http://127.0.0.1:{port}/img/{index}.jpg" for index in range(requests)]
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        received = sum(pool.map(get, urls))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "requests_per_s": round(requests / wall, 1),
        "cpu_ms_per_request": round(1000 * cpu / requests, 3),
        "bytes": received,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # one run, in a fresh process
        print(json.dumps(one_side(args.side, args.port, args.requests, args.threads)))
        return
    from benchmarks.fetch import serve

    ports = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, args.latency), daemon=True)
    server.start()
    port = ports.get(timeout=120)
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    try:
        for repeat in range(args.repeats):
            order = SIDES if repeat % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                command = [sys.executable, __file__, "--side", side, "--port", str(port)]
                command += ["--requests", str(args.requests), "--threads", str(args.threads)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[side].append(json.loads(done.stdout))
                print(f"  {side}: {runs[side][-1]}", file=sys.stderr, flush=True)
    finally:
        server.terminate()
    print(f"{args.requests:,} GETs, {args.threads} threads, latency {args.latency}s, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| client | requests/s (median) | CPU ms per request (median) |")
    print("|---|---|---|")
    for side, side_runs in runs.items():
        rate = statistics.median(run["requests_per_s"] for run in side_runs)
        cpu = statistics.median(run["cpu_ms_per_request"] for run in side_runs)
        print(f"| {side} | {rate:.1f} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
