"""Parse torchrun's "Root Cause (first observed failure)" block (stdlib only).

torchrun exits 1 whatever its workers did; the worker's own exit code and its
global rank are only in this block on torchrun's stderr. Once it is out and the
workers are gone, the agent ends torchrun (:func:`kill_failed_torchrun`).
"""

from clusterlaunch.remote.proctree import descendants, kill_now  # bundle: strip

ROOT_CAUSE_HEADER = "Root Cause (first observed failure):"
_FIELD = r"^\s{1,4}(\w+)\s*:\s?(.*)$"
_RANK = r"(-?\d+)\s*\(local_rank:\s*(\d+)\)"
_EXIT = r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?(?:\s*\((SIG\w+)\))?"


def root_cause_complete(text):
    """True once a root-cause block has been printed to its closing rule."""
    start = text.rfind(ROOT_CAUSE_HEADER)
    return start >= 0 and "\n=====" in text[start:]


def parse_root_cause(text):
    """The last root-cause block in ``text`` as a dict, or None if there is none.

    Keys: rank, local_rank, exitcode (torchrun's: negative for a signal), pid,
    signal (e.g. "SIGKILL" or None), host, error_file.
    """
    start = text.rfind(ROOT_CAUSE_HEADER)
    if start < 0:
        return None  # before importing re: every agent's finish comes here, few with a block
    import re  # here, not at the top: the agent's start-up stays cheap

    fields = {}
    for line in text[start + len(ROOT_CAUSE_HEADER) :].splitlines()[1:]:
        if line.startswith("====="):
            break
        match = re.match(_FIELD, line)
        if match and match.group(1) not in fields:
            fields[match.group(1)] = match.group(2).strip()
    rank = re.match(_RANK, fields.get("rank", ""))
    exit_match = re.match(_EXIT, fields.get("exitcode", ""))
    if rank is None or exit_match is None:
        return None
    return {
        "rank": int(rank.group(1)),
        "local_rank": int(rank.group(2)),
        "exitcode": int(exit_match.group(1)),
        "pid": int(exit_match.group(2)) if exit_match.group(2) else None,
        "signal": exit_match.group(3),
        "host": fields.get("host"),
        "error_file": fields.get("error_file"),
    }


def kill_failed_torchrun(torchrun_pid, err_tail):
    """SIGKILL torchrun once its stderr (``err_tail``) holds its root-cause block and it
    has no workers left; True if it was.

    By then it has closed its workers; what is left is 0.7-1.4 s of
    interpreter shutdown (measured) before it exits, all of which the
    other hosts would otherwise spend still running. Its exit code is 1
    whatever we do, and the block says which rank failed and how.
    """
    text = bytes(err_tail[-16384:]).decode("utf-8", "replace")
    if not root_cause_complete(text) or descendants(torchrun_pid):
        return False
    kill_now(torchrun_pid)
    return True
