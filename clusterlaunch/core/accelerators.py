"""Accelerators: the tool that counts a host's devices, the variable ``devices:`` sets, auto.

==========  ==========================  ===============================
accelerator tool the probe runs          variable ``devices:`` sets
==========  ==========================  ===============================
cuda        ``nvidia-smi``               ``CUDA_VISIBLE_DEVICES``
rocm        ``amd-smi``, ``rocm-smi``    ``HIP_VISIBLE_DEVICES``
npu         ``npu-smi`` (Ascend)         ``ASCEND_RT_VISIBLE_DEVICES``
==========  ==========================  ===============================

A host's ``accelerator:`` picks the row; without one the probe tries the
tools in that order and reports the first it finds
(:mod:`clusterlaunch.remote.accel`, which holds the same table). After the
preflight, :func:`resolve` fills in what was left to it: ``gpus: auto``
counts and detected accelerators, so the job's plan sets the right variable.
Pure: probe reports in, problems and inventories out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from clusterlaunch.core import render
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.limits import MAX_PROCS_PER_HOST, MAX_WORLD_SIZE
from clusterlaunch.core.model import HostSpec, Inventory, NodePlan

DEFAULT = "cuda"
VISIBLE_DEVICES = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "rocm": "HIP_VISIBLE_DEVICES",
    "npu": "ASCEND_RT_VISIBLE_DEVICES",
}
TOOLS = {"cuda": ("nvidia-smi",), "rocm": ("amd-smi", "rocm-smi"), "npu": ("npu-smi",)}
NAMES = tuple(VISIBLE_DEVICES)


def visible_var(accelerator: str | None) -> str:
    """The variable ``devices:`` sets on a host with ``accelerator`` (``None``: cuda's)."""
    return VISIBLE_DEVICES[accelerator or DEFAULT]


def devices_value(devices: Sequence[int]) -> str:
    """``devices: [1, 3]`` as its variable holds it: ``1,3``."""
    return ",".join(str(d) for d in devices)


def left_to_host(spec: HostSpec, exec_argv: Sequence[str] | None) -> str | None:
    """``exec``'s ``devices:`` (``1,3``) on a host without ``accelerator:``, else ``None``.

    Only the host can tell which variable they go in (``run`` knows from its
    preflight): its agent is told them (``--devices``) and sets the variable a
    run would set there (:func:`clusterlaunch.remote.accel.devices_environ`).
    """
    if exec_argv is None or spec.devices is None or spec.accelerator is not None:
        return None
    return devices_value(spec.devices)


def _tools(accelerator: str | None) -> str:
    names = TOOLS[accelerator] if accelerator else tuple(t for ts in TOOLS.values() for t in ts)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


def judge(node: NodePlan, static: Mapping[str, Any]) -> list[str]:
    """Problems with ``node``'s devices, from what its probe reported (``static``)."""
    found, tool = static.get("gpus"), static.get("tool") or "the device tool"
    if isinstance(found, dict):
        return [tool_failure(tool, found)]
    if node.nproc is None:
        count, why = auto_count(static)
        if not count:
            return [f"gpus: auto, but {why}; set gpus: N (or --gpus-per-host N)"]
        if count > MAX_PROCS_PER_HOST:
            return [f"gpus: auto found {count:,} devices; at most {MAX_PROCS_PER_HOST:,}"]
        return []
    if found is None:
        return []  # no tool: a CPU host
    wanted = list(node.devices or range(node.nproc))
    missing = [index for index in wanted if index not in found]
    if missing:
        return [f"needs device(s) {wanted} but {tool} lists {found}; lower gpus: or fix devices:"]
    return []


def tool_failure(tool: str, failure: Mapping[str, Any]) -> str:
    """``nvidia-smi failed (exit 6): No devices were found``: one line, whatever the tool
    wrote (its last lines joined, control characters written as escapes)."""
    said = render.printable(render.last_lines(str(failure.get("error") or ""), 3))
    code = failure.get("code")
    if code is None:  # it could not be run, or did not answer in time
        return f"{tool} failed: {said}"
    return f"{tool} failed (exit {code}): {said or 'no output'}"


def auto_count(static: Mapping[str, Any]) -> tuple[int, str]:
    """``gpus: auto``'s count from a probe report, and why it is 0 when it is.

    A visible-devices variable already set in the host's job environment (by
    its ``setup:``) wins, as it does for torch, and counts what torch counts
    (:func:`torch_visible`): ``export CUDA_VISIBLE_DEVICES=`` means no GPU for the
    job, however many the tool lists, and ``0,-1,1`` one.
    """
    found, declared = static.get("gpus"), static.get("accelerator")
    if not isinstance(found, list):
        return 0, f"no {_tools(declared)} found on this host"
    visible = static.get("visible")
    if visible is None:
        return len(found), f"{static.get('tool')} lists no device"
    shown = f"{visible_var(declared)}={visible!r}"
    seen = torch_visible(str(visible))
    if seen is None:
        return 0, f"torch cannot read {shown} in the host's environment (ValueError)"
    # An index the tool does not list ends the list, as torch.cuda.device_count() ends it.
    lacking = (i for i, d in enumerate(seen) if isinstance(d, int) and d >= len(found))
    return next(lacking, len(seen)), f"{shown} in the host's environment hides every device"


def torch_visible(value: str) -> list[int] | list[str] | None:
    """The devices ``value`` of ``CUDA_VISIBLE_DEVICES`` leaves, read exactly as torch 2.13
    reads it (``torch.cuda._parse_visible_devices``; a unit test compares the two).

    ``GPU-``/``MIG-`` UUIDs: the entries up to the first without that prefix; indices:
    each entry's leading integer (``1gpu2`` is 1), up to the first negative or unreadable
    one (``-1``, ``x``). A repeated entry leaves no device at all. ``None``: torch raises
    ValueError (an entry of only a sign, ``+``).
    """
    if value.startswith(("GPU-", "MIG-")):
        uuids: list[str] = []
        for entry in value.split(","):
            if entry in uuids:
                return []
            if not entry.startswith(value[:4]):
                break
            uuids.append(entry)
        return uuids
    indices: list[int] = []
    for entry in value.split(","):
        try:
            index = _leading_integer(entry.strip())
        except ValueError:
            return None
        if index in indices:
            return []
        if index < 0:
            break
        indices.append(index)
    return indices


def _leading_integer(word: str) -> int:
    """torch's ``_strtoul``: the integer ``word`` starts with (a sign, then digits), else -1."""
    end = 0
    while end < len(word) and (word[end].isdigit() or (end == 0 and word[end] in "+-")):
        end += 1
    return int(word[:end]) if end > 0 else -1


def resolve(inventory: Inventory, reports: Sequence[Mapping[str, Any]]) -> Inventory:
    """``inventory`` with ``gpus: auto`` counted and accelerators filled in from the probes.

    ``reports`` are the probes' static reports, one per host in order. Hosts
    keep an ``accelerator:`` they declare; others take the detected one.
    """
    hosts = []
    for spec, static in zip(inventory.hosts, reports, strict=True):
        gpus = spec.gpus if spec.gpus is not None else auto_count(static)[0]
        accelerator = spec.accelerator or static.get("accelerator")
        hosts.append(replace(spec, gpus=gpus, accelerator=accelerator))
    world = sum(spec.gpus or 0 for spec in hosts)
    if world > MAX_WORLD_SIZE:
        raise UsageError(
            f"gpus: auto gives {world:,} ranks; a job has at most {MAX_WORLD_SIZE:,} ranks"
        )
    return replace(inventory, hosts=tuple(hosts))


def needs_resolving(inventory: Inventory) -> bool:
    """True when the preflight decides something of the plan (auto counts, devices' variable)."""
    return any(
        spec.gpus is None or (spec.devices is not None and spec.accelerator is None)
        for spec in inventory.hosts
    )
