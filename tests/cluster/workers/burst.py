"""Write a known burst of bytes and exit at once (tests/cluster/test_streaming.py).

    python burst.py OUT_BYTES ERR_BYTES [EXIT_CODE]            one burst (exec: per host)
    torchrun ... burst.py OUT_BYTES ERR_BYTES [EXIT_CODE]      one burst per rank
    torchrun ... burst.py huge BYTES                           rank 0: one line on stdout,
                                                               rank 1: one on stderr, no newline

The label is ``$BURST_LABEL`` (exec) or ``r$RANK`` (torchrun); ``$BURST_OUT``,
``$BURST_ERR`` and ``$BURST_EXIT`` override the arguments (per host, through the
hosts file) and ``$BURST_AFTER`` names a file to wait for before; with ``$BURST_DONE`` set, a
file named after the label is created in that directory once the burst is
written. Every segment of the output (up to a newline or a bare carriage return)
starts with ``o<label> `` on stdout and ``e<label> `` on stderr, so a test can
take interleaved output apart again.
"""

import os
import sys
import time

BINARY = bytes(b for b in range(256) if b not in (10, 13))  # non-UTF-8, NUL, ESC...


def payload(tag: bytes, size: int) -> bytes:
    """About ``size`` bytes of numbered lines, progress redraws, CRLF and binary lines.

    Stdout (tag ``o...``) ends without a newline, in the middle of a UTF-8
    character; stderr ends with one.
    """
    parts = []
    total = index = 0
    while total < size:
        head = b"%s %07d " % (tag, index)
        if index % 50 == 7:
            segment = head + b"progress 10%\r" + head + b"progress 60%\r" + head + b"done\r\n"
        elif index % 50 == 23:
            segment = head + BINARY + b"\n"
        else:
            segment = head + b"z" * (index * 7919 % 2000) + b"\n"  # 1 KiB on average
        parts.append(segment)
        total += len(segment)
        index += 1
    if tag.startswith(b"o"):
        parts.append(tag + b" last line, no newline \xe2\x98")
    return b"".join(parts)


def huge_line(rank: int, size: int) -> bytes:
    """One line of ``size`` bytes, no newline: rank 0's on stdout, rank 1's on stderr."""
    unit = b"%d0123456789abcdef\xff" % rank
    return (unit * (size // len(unit) + 1))[:size]


def _write_interleaved(out: bytes, err: bytes) -> None:
    step = 1 << 20
    for start in range(0, max(len(out), len(err)), step):
        sys.stdout.buffer.write(out[start : start + step])
        sys.stderr.buffer.write(err[start : start + step])
    sys.stdout.buffer.flush()
    sys.stderr.buffer.flush()


def main() -> None:
    if sys.argv[1] == "huge":
        rank = int(os.environ["RANK"])
        stream = sys.stdout if rank == 0 else sys.stderr
        stream.buffer.write(huge_line(rank, int(sys.argv[2])))
        stream.buffer.flush()
        os._exit(0)
    label = os.environ.get("BURST_LABEL") or "r" + os.environ["RANK"]
    out_size = int(os.environ.get("BURST_OUT") or sys.argv[1])
    err_size = int(os.environ.get("BURST_ERR") or sys.argv[2])
    code = int(os.environ.get("BURST_EXIT") or (sys.argv[3] if len(sys.argv) > 3 else 0))
    tags = (b"o" + label.encode(), b"e" + label.encode())
    while os.environ.get("BURST_AFTER") and not os.path.exists(os.environ["BURST_AFTER"]):
        time.sleep(0.02)
    _write_interleaved(payload(tags[0], out_size), payload(tags[1], err_size))
    if os.environ.get("BURST_DONE"):
        open(os.path.join(os.environ["BURST_DONE"], label), "w").close()
    os._exit(code)  # right after the burst: no interpreter shutdown to wait for


if __name__ == "__main__":
    main()
