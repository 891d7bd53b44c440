"""Rank 1 writes a line past the 4 MiB cut on stderr and one under it on stdout, neither
ended, and fails with code 3 (tests/cluster/test_streaming.py); the others exit at once."""

import os

ERR_LINE = b"E" * 5_000_000
OUT_LINE = b"start " + b"y" * 3_000_000 + b" END-NO-NEWLINE"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__" and os.environ["RANK"] == "1":
    write_all(2, ERR_LINE)
    write_all(1, OUT_LINE)
    os._exit(3)
