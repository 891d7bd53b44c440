"""Count a host's accelerators with its own tool (stdlib only; part of the probe).

The same table as :mod:`clusterlaunch.core.accelerators` (a unit test keeps
them equal): NVIDIA ``nvidia-smi``, AMD ``amd-smi`` then ``rocm-smi``, Ascend
``npu-smi``. Each parser reads the device indices the tool prints; the
parsers are tested against recorded output in tests/unit/data/accel/.
"""

import os

from clusterlaunch.core.exits import shell_status  # bundle: strip
from clusterlaunch.remote.proctree import kill_group_now  # bundle: strip

TOOL_TIMEOUT_S = 15
"""How long a device tool may take (a hung driver can keep ``nvidia-smi`` forever)."""
SAID_LINES = 3
"""The last lines of a failing tool's message the preflight shows (on one line there)."""
VISIBLE_DEVICES = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "rocm": "HIP_VISIBLE_DEVICES",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
}
# (accelerator, tool, arguments), in the order they are tried.
TOOL_RUNS = (
    ("cuda", "nvidia-smi", ["--query-gpu=index", "--format=csv,noheader"]),
    ("rocm", "amd-smi", ["list"]),
    ("rocm", "rocm-smi", ["--showid"]),
    ("npu", "npu-smi", ["info", "-m"]),
)


def parse_nvidia_smi(text):
    """``0\\n1\\n``: one index per line."""
    return [int(word) for word in text.split() if word.isdigit()]


def parse_amd_smi(text):
    """``GPU: 0`` opens each device's block of ``amd-smi list``."""
    import re

    return sorted({int(m) for m in re.findall(r"^GPU:\s*([0-9]+)", text, re.MULTILINE)})


def parse_rocm_smi(text):
    """``GPU[0]\\t\\t: Device ID: ...``: several lines per device, one index."""
    import re

    return sorted({int(m) for m in re.findall(r"^GPU\[([0-9]+)\]", text, re.MULTILINE)})


def parse_npu_smi(text):
    """``npu-smi info -m``: NPU ID, Chip ID, Chip Logic ID, Chip Name per chip.

    The logic ID is the device index ``ASCEND_RT_VISIBLE_DEVICES`` and torch_npu
    use (on two-die cards it differs from the NPU ID); chips without one
    (``-``: the board's Mcu) are no compute devices.
    """
    found = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and all(word.isdigit() for word in words[:3]):
            found.append(int(words[2]))
    return sorted(set(found))


PARSERS = {
    "nvidia-smi": parse_nvidia_smi,
    "amd-smi": parse_amd_smi,
    "rocm-smi": parse_rocm_smi,
    "npu-smi": parse_npu_smi,
}


def find_devices(declared=None):
    """``{"accelerator", "tool", "gpus", "visible"}`` for this host.

    ``gpus`` is the list of device indices, ``None`` when no tool is here (a
    CPU host), or ``{"error": ..., "code": ...}`` when the tool failed (``code``:
    its exit status, none when it did not answer in time); ``visible`` is the
    accelerator's visible-devices variable as the job environment has it.
    """
    found = find_tool(declared)
    if found is None:
        visible = os.environ.get(VISIBLE_DEVICES[declared]) if declared else None
        return {"accelerator": declared, "tool": None, "gpus": None, "visible": visible}
    kind, tool, path, arguments = found
    return dict(
        _run(path, arguments, PARSERS[tool]),
        accelerator=kind,
        tool=tool,
        visible=os.environ.get(VISIBLE_DEVICES[kind]),
    )


def find_tool(declared=None):
    """``(accelerator, tool, path, arguments)`` of the first tool on the PATH (only
    ``declared``'s when given), or ``None``: the one detection ``run`` and ``exec`` share."""
    for kind, tool, arguments in TOOL_RUNS:
        if declared and kind != declared:
            continue
        path = _which(tool)
        if path is not None:
            return kind, tool, path, arguments
    return None


def devices_environ(devices):
    """``exec``'s ``devices:`` (``"1,3"``) in the variable this host's accelerator reads,
    detected as ``run``'s preflight detects it (cuda's where no tool is found); without the
    tool run: the kind is all ``exec`` needs."""
    if devices is None:
        return {}
    found = find_tool()
    return {VISIBLE_DEVICES[found[0] if found else "cuda"]: devices}


def _run(path, arguments, parse, timeout=TOOL_TIMEOUT_S):
    """The tool's device indices; in a process group of its own, so a tool that does not
    answer in time is stopped with everything it started (its children outlived it)."""
    import subprocess  # here, as re in the parsers: the agent bundles this module

    try:
        tool = subprocess.Popen(
            [path, *arguments],
            stdin=subprocess.DEVNULL,  # not the SSH channel, which carries our control bytes
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return {"gpus": {"error": "cannot run %s: %s" % (path, exc.strerror or exc)}}
    try:
        out, err = tool.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group_now(tool.pid)
        tool.wait()  # not communicate(): a child that left the group may hold the pipes
        tool.stdout.close()
        tool.stderr.close()
        return {"gpus": {"error": "no answer within %d s; it was stopped" % timeout}}
    if tool.returncode != 0:
        said = err if err.strip() else out  # nvidia-smi says "No devices were found" on stdout
        return {"gpus": {"error": last_lines(said), "code": shell_status(tool.returncode)}}
    return {"gpus": parse(out.decode("utf-8", "replace"))}


def last_lines(output):
    """The last :data:`SAID_LINES` lines of a tool's message, each cut to 200 characters."""
    lines = output.decode("utf-8", "replace").strip().splitlines()[-SAID_LINES:]
    return "\n".join(line[:200] for line in lines)


def _which(tool):
    import shutil  # here: the agent bundles this module, and most execs look for no tool

    return shutil.which(tool)
