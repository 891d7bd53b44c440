"""``clusterlaunch doctor`` on one host: its facts, then the network checks the controller asks for.

Runs under the job's own shell prefix (workdir, setup, env), so the
``*_SOCKET_IFNAME`` variables and the Python it sees are the job's. Stdlib
only, Python >= 3.8; every answer is an event frame of
:mod:`clusterlaunch.core.protocol` with a ``stage`` field.

1. Listens on an ephemeral port (what torch's collectives open between every
   pair of hosts, unlike the master port) and reports ``facts`` with the port.
2. Then obeys one JSON command per stdin line: ``clock`` (report this host's
   time now), ``pairs`` (dial every peer's port at once, each bounded by the
   timeout), ``tput`` (send N bytes to one peer, report the rate), ``done``.
   Stdin at its end counts as ``done``.

The listener answers a dial that sends the nonce with the nonce, and a
``sink`` with the number of bytes it swallowed, so a hit on another service
never counts as reachable.
"""

import argparse
import json
import socket
import sys
import threading
import time

from clusterlaunch.core.hostport import host_port  # bundle: strip
from clusterlaunch.core.protocol import SYNC, encode_event  # bundle: strip
from clusterlaunch.remote.hostfacts import host_facts  # bundle: strip
from clusterlaunch.remote.listener import open_listener  # bundle: strip
from clusterlaunch.remote.teardown import ending_setup_leftovers  # bundle: strip

CHUNK = 1 << 20


def emit(**fields):
    """One stage's answer, as an event frame."""
    sys.stdout.buffer.write(encode_event(fields))
    sys.stdout.buffer.flush()


def answer(listener, nonce, stop):
    """Serve every dialler until ``stop``: an echo check, or a sink for throughput."""
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:  # noqa: UP041 (not TimeoutError before Python 3.10)
            continue
        except OSError:
            return
        threading.Thread(target=_one_peer, args=(conn, nonce), daemon=True).start()


def _one_peer(conn, nonce):
    with conn:
        conn.settimeout(30)
        try:
            words = _read_line(conn).split()
            if len(words) != 2 or words[0] != nonce:
                return
            if words[1] == b"ping":
                conn.sendall(nonce + b" ok\n")
            elif words[1] == b"sink":
                total = 0
                while True:
                    data = conn.recv(CHUNK)
                    if not data:
                        break
                    total += len(data)
                conn.sendall(b"%d\n" % total)
        except OSError:
            pass


def _read_line(conn):
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        piece = conn.recv(1)
        if not piece:
            break
        data += piece
    return data


def dial(addr, port, nonce, timeout):
    """None when ``addr:port`` answers as our listener, else why not."""
    started = time.monotonic()
    try:
        with socket.create_connection((addr, port), timeout=timeout) as conn:
            conn.sendall(nonce + b" ping\n")
            reply = _read_line(conn)
    except OSError as exc:
        return "cannot connect to %s: %s" % (host_port(addr, port), exc), None
    if reply.strip() != nonce + b" ok":
        return "%s answered, but not as the doctor's listener" % host_port(addr, port), None
    return None, round((time.monotonic() - started) * 1000, 2)


def check_pairs(peers, nonce, timeout):
    """Dial every peer at once: ``{name: {"error", "ms"}}``."""
    results = {}

    def one(name, addr, port):
        error, ms = dial(addr, port, nonce, timeout)
        results[name] = {"error": error, "ms": ms, "addr": addr, "port": port}

    threads = [threading.Thread(target=one, args=tuple(peer), daemon=True) for peer in peers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 5)
    for name, addr, port in peers:  # a thread stuck past its timeout: report it, never wait
        results.setdefault(name, {"error": "no answer in %g s" % timeout, "ms": None})
        results[name].setdefault("addr", addr)
        results[name].setdefault("port", port)
    return results


def throughput(addr, port, nonce, size, timeout):
    """Send ``size`` bytes to the peer's sink: ``{"mbps"}`` (MB/s, 10^6), or ``{"error"}``."""
    block = b"\0" * CHUNK
    started = time.monotonic()
    try:
        with socket.create_connection((addr, port), timeout=timeout) as conn:
            conn.sendall(nonce + b" sink\n")
            sent = 0
            while sent < size:
                piece = block[: min(CHUNK, size - sent)]
                conn.sendall(piece)
                sent += len(piece)
            conn.shutdown(socket.SHUT_WR)
            got = _read_line(conn).strip()
    except OSError as exc:
        return {"error": "%s: %s" % (host_port(addr, port), exc)}
    seconds = time.monotonic() - started
    if got != b"%d" % size:
        return {"error": "%s took %r of %d bytes" % (host_port(addr, port), got, size)}
    return {"mbps": round(size / seconds / 1e6, 1), "seconds": round(seconds, 4), "bytes": size}


def obey(command, nonce, timeout):
    """Carry out one controller command; False when it says we are done."""
    what = command.get("do")
    if what == "clock":
        emit(stage="clock", time=time.time())
    elif what == "pairs":
        emit(stage="pairs", results=check_pairs(command["peers"], nonce, timeout))
    elif what == "tput":
        rate = throughput(command["addr"], command["port"], nonce, command["bytes"], timeout)
        emit(stage="tput:%s" % command["peer"], **rate)
    return what != "done"


def main(argv=None):
    return ending_setup_leftovers(examine, argv)


def examine(argv):
    parser = argparse.ArgumentParser(prog="clusterlaunch-doctor")
    parser.add_argument("--master-addr")
    parser.add_argument("--nonce", required=True)
    parser.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(SYNC)
    nonce = args.nonce.encode()
    facts = host_facts(args.master_addr)
    stop = threading.Event()
    try:
        listener = open_listener(0)  # dual-stack, as the preflight's
        facts["port"] = listener.getsockname()[1]
    except OSError as exc:
        listener = None
        facts["listen_error"] = "cannot listen on an ephemeral port: %s" % exc
    emit(stage="facts", **facts)
    if listener is not None:
        threading.Thread(target=answer, args=(listener, nonce, stop), daemon=True).start()
    for line in iter(sys.stdin.readline, ""):
        try:
            command = json.loads(line)
        except ValueError:
            continue
        if not obey(command, nonce, args.timeout):
            break
    stop.set()
    if listener is not None:
        listener.close()
    emit(stage="end")


if __name__ == "__main__":
    main()
