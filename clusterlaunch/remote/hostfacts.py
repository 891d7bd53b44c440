"""What ``clusterlaunch doctor`` reads on a host: versions, GPUs, names, interfaces (stdlib only).

Facts only, no judgement: :mod:`clusterlaunch.core.doctor` decides what is a
finding. Bundled into the doctor program (see :mod:`clusterlaunch.remote`), so
Python >= 3.8, no ``from __future__``. Importing torch costs ~1.2 s of CPU and
is done only on hosts with an NVIDIA GPU, where the NCCL version needs it;
elsewhere torch's version and CUDA runtime are read from its files.
"""

import fcntl
import os
import platform
import re
import shutil
import socket
import struct
import subprocess
import sys

from clusterlaunch.remote.diskspace import rank_files_space  # bundle: strip
from clusterlaunch.remote.torchfiles import torch_files  # bundle: strip

SIOCGIFADDR = 0x8915  # <linux/sockios.h>: an interface's IPv4 address
IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
GPU_QUERY = "--query-gpu=index,name,driver_version,memory.used,memory.total"
APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"


def nccl_version(python):
    """``torch.cuda.nccl.version()`` as ``"2.21.5"``, or ``{"error": ...}``: imports torch."""
    code = "import torch;print('.'.join(map(str,torch.cuda.nccl.version())))"
    try:
        done = subprocess.run(
            [python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=45
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    if done.returncode != 0:
        return {"error": done.stderr.decode("utf-8", "replace").strip()[-200:]}
    return done.stdout.decode().strip()


def parse_gpu_query(text):
    """Rows of ``nvidia-smi GPU_QUERY --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 5 and cells[0].isdigit():
            gpus.append(
                {
                    "index": int(cells[0]),
                    "name": cells[1],
                    "driver": cells[2],
                    "memory_used_mib": _number(cells[3]),
                    "memory_total_mib": _number(cells[4]),
                }
            )
    return gpus


def parse_apps_query(text):
    """Rows of ``nvidia-smi APPS_QUERY --format=csv,noheader,nounits``: who holds GPU memory."""
    apps = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 4 and cells[1].isdigit():
            apps.append(
                {
                    "gpu_uuid": cells[0],
                    "pid": int(cells[1]),
                    "name": cells[2],
                    "memory_mib": _number(cells[3]),
                }
            )
    return apps


def _number(text):
    try:
        return int(text)
    except ValueError:
        return None


def _smi(tool, query):
    try:
        done = subprocess.run(
            [tool, query, "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if done.returncode != 0:
        return None, done.stderr.decode("utf-8", "replace").strip()[-200:]
    return done.stdout.decode("utf-8", "replace"), None


def gpu_facts():
    """NVIDIA GPUs (model, driver, memory in use, processes); ``gpu_tool`` None on a CPU host."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {"gpu_tool": None, "gpus": [], "gpu_processes": []}
    text, error = _smi(tool, GPU_QUERY)
    if error is not None:
        return {"gpu_tool": "nvidia-smi", "gpus": [], "gpu_processes": [], "gpu_error": error}
    apps, _ = _smi(tool, APPS_QUERY)
    return {
        "gpu_tool": "nvidia-smi",
        "gpus": parse_gpu_query(text or ""),
        "gpu_processes": parse_apps_query(apps or ""),
    }


def interfaces():
    """``{name: IPv4 address or None}`` of every interface of this host."""
    found = {}
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return found
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for name in names:
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
                found[name] = socket.inet_ntoa(answer[20:24])
            except OSError:  # no IPv4 address on it
                found[name] = None
    finally:
        probe.close()
    return found


def own_name():
    """This host's name and what it resolves to here (as gloo and the c10d store resolve it)."""
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except OSError as exc:
        return {"hostname": name, "resolves_to": [], "resolve_error": str(exc)}
    addresses = []
    for info in infos:
        if info[4][0] not in addresses:
            addresses.append(info[4][0])
    return {"hostname": name, "resolves_to": addresses}


def route_to(addr, iface_addrs):
    """The interface and source address this host uses to reach ``addr``."""
    try:
        family = socket.getaddrinfo(addr, 9, 0, socket.SOCK_DGRAM)[0][0]
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.connect((addr, 9))  # UDP: no packet is sent, the kernel only picks a route
            source = udp.getsockname()[0]
    except OSError as exc:
        return {"route_error": "no route to %s: %s" % (addr, exc)}
    device = _ip_route_device(addr)
    if device is None:
        device = next((name for name, ip in iface_addrs.items() if ip == source), None)
    return {"route_source": source, "route_interface": device}


def _ip_route_device(addr):
    """``dev`` of ``ip -o route get ADDR`` (local routes too), or None without ``ip``."""
    tool = shutil.which("ip")
    if tool is None:
        return None
    try:
        done = subprocess.run(
            [tool, "-o", "route", "get", addr],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\bdev (\S+)", done.stdout.decode("utf-8", "replace"))
    return match.group(1) if match else None


def disk_free(path):
    try:
        usage = shutil.disk_usage(path)
    except OSError as exc:
        return {"disk_error": str(exc)}
    return {"disk_free_bytes": usage.free, "disk_total_bytes": usage.total}


def host_facts(master_addr):
    """Every fact of this host the doctor reports, as one flat JSON-able dict."""
    facts = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "workdir": os.getcwd(),
        "ifname_env": {name: os.environ.get(name) for name in IFNAME_VARIABLES},
    }
    facts.update(torch_files())
    facts.update(gpu_facts())
    if facts["gpus"] and facts["torch"]:
        facts["nccl"] = nccl_version(sys.executable)
    else:
        facts["nccl"] = None
    facts.update(own_name())
    facts["interfaces"] = interfaces()
    if master_addr:
        facts.update(route_to(master_addr, facts["interfaces"]))
    facts.update(disk_free(os.getcwd()))
    facts["rank_files"] = rank_files_space()  # where torchrun's per-rank files go: /tmp
    return facts
