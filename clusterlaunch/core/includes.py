"""Which hosts and devices a job uses: ``--include``/``--exclude``, ``--gpus-per-host``.

``--include`` and ``--exclude`` take DeepSpeed's syntax and meaning
(``deepspeed/launcher/runner.py``, ``parse_resource_filter``):
``NODE_SPEC[@NODE_SPEC ...]`` where ``NODE_SPEC = NAME[:SLOT[,SLOT ...]]``; a
name alone means every slot of that host, and a NAME may be a range as the
hosts file writes one (``gpu[01-04]:0``: slot 0 of each). A host's slots are its ``devices:``
when it has them, else ``0 .. gpus-1``. What is kept becomes the host's
``devices:`` (and so its ``*_VISIBLE_DEVICES``) and ``gpus:``; hosts left
with no slot drop out, and the order of the hosts file is kept. A host named
twice has its slots merged and sorted, a name alone adding none to named slots
(``w0:1@w0`` is GPU 1), as DeepSpeed reads a filter since 0.15.2
(``parse_node_config_list``); before, a later entry replaced an earlier one.
An IPv6 host (DeepSpeed's syntax has none: its ``:`` starts the slots) is named
by its address alone, in any spelling of the file's (``fd42:6::11``), and its
slots follow the address in brackets (``[fd42:6::11]:0,1``).
Pure: inventories in, inventories out.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import replace

from clusterlaunch.core import hostranges
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.hostnames import canonical_address
from clusterlaunch.core.model import HostSpec, Inventory

NODE_SEP = "@"
SLOT_START = ":"
SLOT_SEP = ","
_SLOTS = re.compile(r"[0-9]+(?:,[0-9]+)*")
_BRACKETED = re.compile(r"\[([^\[\]]*:[^\[\]]*)\](?::(.*))?")  # [ADDR] or [ADDR]:SLOTS


def parse_filter(text: str, flag: str, known: Collection[str] = ()) -> dict[str, list[int]]:
    """``w0@w1:0,2`` → ``{"w0": [], "w1": [0, 2]}``: each host's slots (merged, sorted).

    ``known``: the hosts file's host names. An IPv6 host has colons of its own: it is
    named alone as an address (any spelling of one of ``known``), with slots in brackets
    (``[fd42:6::11]:0,1``), which DeepSpeed's syntax has no other way to write.
    """
    addresses = {spelled: name for name in known if (spelled := canonical_address(name))}
    found: dict[str, set[int]] = {}
    for spec in text.split(NODE_SEP):
        name, colon, slots = _parts(spec, addresses)
        if not name.strip() or SLOT_START in slots or (colon and not slots):
            raise UsageError(f"{flag} {text!r}: cannot read {spec!r}: {_form(spec, addresses)}")
        indices = {_slot(slot, flag, text) for slot in slots.split(SLOT_SEP)} if colon else set()
        as_written = name in known or canonical_address(name)  # an address: no range
        for host in [name] if as_written else _names(name, flag, text):
            found.setdefault(host, set()).update(indices)
    return {name: sorted(indices) for name, indices in found.items()}


def _parts(spec: str, addresses: Mapping[str, str]) -> tuple[str, str, str]:
    """(host, ":" or "", slots) of one NODE_SPEC; an address host as the file spells it;
    ("", "", "") where it cannot be read."""
    bracketed = _BRACKETED.fullmatch(spec)
    if bracketed:
        name = addresses.get(canonical_address(bracketed[1]) or "", bracketed[1])
        return name, SLOT_START if bracketed[2] is not None else "", bracketed[2] or ""
    if spec.count(SLOT_START) < 2:
        return spec.partition(SLOT_START)
    in_file = addresses.get(canonical_address(spec) or "")
    if in_file is not None:
        return in_file, "", ""
    if canonical_address(spec) and not _meant_slots(spec, addresses):
        return spec, "", ""  # an address alone: "no host ... in FILE" names the file's
    return "", "", ""


def _meant_slots(spec: str, addresses: Mapping[str, str]) -> str | None:
    """``[ADDR]:SLOTS`` where ``spec`` is ``ADDR:SLOTS`` of a host of the file, else None."""
    host, _, slots = spec.rpartition(SLOT_START)
    if canonical_address(host) in addresses and _SLOTS.fullmatch(slots):
        return f"[{host}]:{slots}"
    return None


def _form(spec: str, addresses: Mapping[str, str]) -> str:
    """What to write instead, never the form given (``spec`` was written so)."""
    if spec.startswith("["):
        return "write an IPv6 host's GPUs as [ADDR]:SLOT[,SLOT...], e.g. [::1]:0,2"
    if spec.count(SLOT_START) < 2:
        return "write HOST or HOST:SLOT[,SLOT...] joined by @, e.g. worker-0@worker-1:0,2"
    meant = _meant_slots(spec, addresses)
    if meant is not None:
        return f"an IPv6 host's GPUs follow its address in brackets: write {meant}"
    return (
        "a host name holds no ':'; write an IPv6 host as its address alone (::1), or "
        "its GPUs after the address in brackets ([::1]:0,2)"
    )


def _slot(slot: str, flag: str, text: str) -> int:
    if not slot.strip().isdigit() or not slot.strip().isascii():
        raise UsageError(f"{flag} {text!r}: {slot!r} is not a GPU index (0, 1, ...)")
    return int(slot)


def _names(name: str, flag: str, text: str) -> list[str]:
    """A host, or a range of them as the hosts file writes it (``gpu[01-04]``)."""
    try:
        return hostranges.expand_hosts(name)
    except hostranges.HostRangeError as exc:
        raise UsageError(f"{flag} {text!r}: {exc}") from None


def host_slots(spec: HostSpec) -> list[int] | None:
    """The device indices a host offers, or ``None`` while its ``gpus: auto`` is unresolved."""
    if spec.devices is not None:
        return list(spec.devices)
    return None if spec.gpus is None else list(range(spec.gpus))


def select_hosts(inventory: Inventory, include: str | None, exclude: str | None) -> Inventory:
    """``inventory`` narrowed by ``--include`` or ``--exclude`` (at most one of them)."""
    if include and exclude:
        raise UsageError("--include and --exclude cannot be combined; use one of them")
    text, flag = (include, "--include") if include else (exclude, "--exclude")
    if not text:
        return inventory
    known = {spec.host for spec in inventory.hosts}
    wanted = parse_filter(text, flag, known)
    for name in wanted:
        if name not in known:
            shown = ", ".join(sorted(known)[:8]) + (", ..." if len(known) > 8 else "")
            raise UsageError(f"{flag} {text!r}: no host {name!r} in {inventory.path} ({shown})")
    kept = []
    for spec in inventory.hosts:
        slots = wanted.get(spec.host)
        chosen = _included(spec, slots, flag, text) if include else _left(spec, slots, flag, text)
        if chosen is not None:
            kept.append(chosen)
    if not kept:
        raise UsageError(f"{flag} {text!r} leaves no host to run on")
    note = f"{flag} {text}: {len(kept)} of {len(inventory.hosts)} host(s)"
    return replace(inventory, hosts=tuple(kept), notes=(*inventory.notes, note))


def _checked(spec: HostSpec, slots: list[int], flag: str, text: str) -> list[int]:
    offered = host_slots(spec)
    if offered is None:
        if flag == "--exclude":
            raise UsageError(
                f"{flag} {text!r}: {spec.host} has gpus: auto, so its devices are known only "
                f"at launch; name the ones to use with --include {spec.host}:0,1,... or set gpus:"
            )
        return slots  # the preflight checks that they exist
    for slot in slots:
        if slot not in offered:
            raise UsageError(
                f"{flag} {text!r}: {spec.host} has no GPU {slot} (its GPUs: "
                f"{','.join(map(str, offered))})"
            )
    return slots


def _included(spec: HostSpec, slots: list[int] | None, flag: str, text: str) -> HostSpec | None:
    if slots is None:
        return None
    if not slots:
        return spec
    return _with_devices(spec, _checked(spec, slots, flag, text))


def _left(spec: HostSpec, slots: list[int] | None, flag: str, text: str) -> HostSpec | None:
    if slots is None:
        return spec
    if not slots:
        return None
    removed = set(_checked(spec, slots, flag, text))
    rest = [slot for slot in host_slots(spec) or () if slot not in removed]
    return _with_devices(spec, rest) if rest else None


def _with_devices(spec: HostSpec, slots: list[int]) -> HostSpec:
    return replace(spec, devices=tuple(slots), gpus=len(slots))


def override_gpus(inventory: Inventory, gpus: int | None) -> Inventory:
    """``--gpus-per-host N`` (``None``: ``auto``) for every host of a hosts file."""
    hosts = []
    for spec in inventory.hosts:
        if spec.devices is not None and gpus is not None and len(spec.devices) != gpus:
            where = inventory.path if spec.line is None else f"{inventory.path}:{spec.line}"
            raise UsageError(
                f"--gpus-per-host {gpus}: {where}: {spec.host} has devices: "
                f"{list(spec.devices)}; drop --gpus-per-host or change devices:"
            )
        count = len(spec.devices) if spec.devices is not None else gpus
        hosts.append(replace(spec, gpus=count))
    return replace(inventory, hosts=tuple(hosts))
