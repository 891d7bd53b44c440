"""Coming from torchrun, DeepSpeed, accelerate, mpirun or pdsh: their flags, clusterlaunch's way.

One table, two uses: an unknown option on the command line gets one line
naming the clusterlaunch equivalent (``--nproc-per-node: use gpus: in the
hosts file or --gpus-per-host``), and docs/coming-from.md shows the same rows
side by side (tests/unit/test_migrate.py keeps the page equal to
:func:`markdown`). torchrun's options are also known by every spelling its
argparse takes (``--nproc``, ``-t3``). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from clusterlaunch.core.torchrunargs import torchrun_option


@dataclass(frozen=True)
class Flag:
    """Flags of one tool that mean one thing, and how clusterlaunch says it."""

    tool: str
    flags: tuple[str, ...]
    clusterlaunch: str


def _rows(tool: str, *rows: tuple[str, str]) -> list[Flag]:
    return [Flag(tool, tuple(flags.split()), text) for flags, text in rows]


HOSTFILE = "give the hosts file as HOSTS: clusterlaunch run HOSTFILE SCRIPT (MPI format works)"
NPROC = "use gpus: in the hosts file or --gpus-per-host (N or auto)"
WORLD = "use gpus: per host in the hosts file; the world size is their sum"
HOSTS = "write the hosts in a hosts file (gpu[01-04] works), give it as HOSTS"
RANK_ORDER = "ranks follow the hosts file: node 0 takes ranks 0 to gpus-1"
NNODES = "list the hosts in the hosts file (or run inside Slurm with HOSTS=slurm)"
NODE_RANK = "clusterlaunch sets it: node ranks follow the order of the hosts file"
MASTER_ADDR = "use --master-addr or master_addr: in the hosts file (default: node 0's address)"
MASTER_PORT = "use --master-port or master_port: in the hosts file (default: auto)"
MODULE = "use clusterlaunch run -m HOSTS MODULE (SCRIPT is then a module)"
NO_PYTHON = "use clusterlaunch run --no-python HOSTS PROGRAM"
RESTARTS = (
    "use --max-restarts N (restarts the whole job, on the hosts left); torchrun's own "
    'restarts on the same hosts: --torchrun-args="--max-restarts 3"'
)
INCLUDE = "use --include (the same syntax: worker-0@worker-1:0,2)"
EXCLUDE = "use --exclude (the same syntax: worker-1:0)"
DEVICES = "use devices: in the hosts file, or --include HOST:0,1"
ENV = "use --env KEY=VALUE, --env-file FILE or --forward-env PATTERN"
SSH_PORT = "use port: in the hosts file, or Port in your SSH config"
# accelerate launch's own settings reach the script's Accelerator() as variables.
ACCELERATE_ENV = "use --env {var} (what accelerate launch sets; Accelerator() reads it)"
DEEPSPEED_ENV = "use --env {var} with --env ACCELERATE_USE_DEEPSPEED=true"
LOGS = "use --log-dir DIR: one rank-N.log per rank and controller.log"
# torchrun's options clusterlaunch leaves to torchrun; {flag} is the flag as typed.
TORCHRUN_VALUE = 'torchrun\'s own: pass it with --torchrun-args="{flag} VALUE"'
TORCHRUN_FLAG = 'torchrun\'s own: pass it with --torchrun-args="{flag}"'

TABLE: tuple[Flag, ...] = (
    *_rows(
        "torchrun",
        ("--nproc-per-node --nproc_per_node", NPROC),
        ("--nnodes", NNODES),
        ("--node-rank --node_rank", NODE_RANK),
        ("--master_addr", MASTER_ADDR),
        ("--master_port", MASTER_PORT),
        (
            "--rdzv-backend --rdzv_backend --rdzv-endpoint --rdzv_endpoint --standalone",
            "clusterlaunch uses static rendezvous on node 0; for one machine use host: localhost",
        ),
        (
            "--rdzv-id --rdzv_id",
            'clusterlaunch uses the job id; pass your own with --torchrun-args="--rdzv-id X"',
        ),
        ("--max_restarts", RESTARTS),
        ("-m --module", MODULE),
        ("--no_python", NO_PYTHON),
        ("--log_dir --redirects --tee -r -t", LOGS),
        ("--local-ranks-filter --local_ranks_filter", "use --ranks 0,4-7 (shown on the console)"),
        ("--logs-specs --logs_specs", LOGS),
        (
            "--run-path --run_path",
            "not supported: SCRIPT runs as python SCRIPT, as torchrun's default",
        ),
        (
            "--rdzv-conf --rdzv_conf --start-method --start_method --role --local-addr "
            "--local_addr --event-log-handler "
            "--event_log_handler --duplicate-stdout-filters --duplicate_stdout_filters "
            "--duplicate-stderr-filters --duplicate_stderr_filters --numa-binding --numa_binding "
            "--signals-to-handle --signals_to_handle --shutdown-timeout --shutdown_timeout "
            "--monitor-interval --monitor_interval",
            TORCHRUN_VALUE,
        ),
        ("--virtual-local-rank --virtual_local_rank", TORCHRUN_FLAG),
    ),
    *_rows(
        "DeepSpeed",
        ("-H --hostfile", HOSTFILE),
        ("-i", INCLUDE),
        ("-e", EXCLUDE),
        ("--num_nodes", "use --include with the hosts to use, or list fewer hosts"),
        ("--num_gpus --num_accelerators", "use --gpus-per-host N (or gpus: in the hosts file)"),
        ("--master_addr", MASTER_ADDR),
        ("--master_port", MASTER_PORT),
        ("--no_python", NO_PYTHON),
        ("--launcher", "use --transport ssh or srun (srun: the default for HOSTS=slurm)"),
        ("--ssh_port --ssh", SSH_PORT),  # --ssh: DeepSpeed's argparse takes it for --ssh_port
        (
            "--venv_script",
            "use setup: source VENV/bin/activate in the hosts file, or python: VENV/bin/python",
        ),
        ("--no_local_rank", "not needed: torchrun gives LOCAL_RANK in the environment"),
        ("--enable_each_rank_log", LOGS),
        ("--force_multi --no_ssh_check", "not needed: every host is checked by the preflight"),
        ("--node_rank", NODE_RANK),
        ("--no_ssh", "not needed: clusterlaunch starts every host itself (localhost without SSH)"),
        ("--launcher_args", "with HOSTS=slurm, give srun's options to salloc or sbatch"),
        (
            "--comment --account",
            "give it to salloc or sbatch; with HOSTS=slurm the job runs in that allocation",
        ),
        ("--save_pid", "use clusterlaunch ps HOSTS: every job's id, hosts and processes"),
        (
            "--elastic_training --min_elastic_nodes --max_elastic_nodes",
            "use --max-restarts N with --min-hosts M or spare: hosts (docs/resilience.md)",
        ),
        (
            "--bind_cores_to_rank --bind_core_list",
            'with CUDA GPUs, use --torchrun-args="--numa-binding exclusive" (each rank its '
            "own cores; on a CPU-only host every rank fails: Torch not compiled with CUDA)",
        ),
        ("--autotuning", "DeepSpeed's own: run the autotuner with the deepspeed launcher"),
    ),
    *_rows(
        "accelerate",
        ("--num_processes", WORLD),
        ("--num_machines", NNODES),
        ("--machine_rank", NODE_RANK),
        ("--main_process_ip", MASTER_ADDR),
        ("--main_process_port", MASTER_PORT),
        ("--no_python", NO_PYTHON),
        ("--gpu_ids", DEVICES),
        ("--multi_gpu", "not needed: more than one process per host is gpus: N"),
        ("--config_file", "the hosts file holds what a launch needs (hosts, gpus:, env:, setup:)"),
        ("--mixed_precision", ACCELERATE_ENV.format(var="ACCELERATE_MIXED_PRECISION=bf16")),
        ("--use_deepspeed", ACCELERATE_ENV.format(var="ACCELERATE_USE_DEEPSPEED=true")),
        ("--deepspeed_config_file", DEEPSPEED_ENV.format(var="ACCELERATE_DEEPSPEED_CONFIG_FILE=F")),
        ("--zero_stage", DEEPSPEED_ENV.format(var="ACCELERATE_DEEPSPEED_ZERO_STAGE=N")),
        ("--use_fsdp", ACCELERATE_ENV.format(var="ACCELERATE_USE_FSDP=true")),
        ("--dynamo_backend", ACCELERATE_ENV.format(var="ACCELERATE_DYNAMO_BACKEND=INDUCTOR")),
        ("--cpu", ACCELERATE_ENV.format(var="ACCELERATE_USE_CPU=true")),
        ("--debug", ACCELERATE_ENV.format(var="ACCELERATE_DEBUG_MODE=true")),
        ("--enable_cpu_affinity", ACCELERATE_ENV.format(var="ACCELERATE_CPU_AFFINITY=1")),
        ("--num_cpu_threads_per_process", "use --env OMP_NUM_THREADS=N"),
        (
            "--same_network",
            "not needed: every node reaches node 0's address and port (static rendezvous)",
        ),
        ("--main_training_function", "not needed (TPU pods only): SCRIPT runs as a script"),
        ("--deepspeed_hostfile", HOSTFILE),
        ("--deepspeed_inclusion_filter", INCLUDE),
        ("--deepspeed_exclusion_filter", EXCLUDE),
        ("--deepspeed_multinode_launcher", "not needed: clusterlaunch starts every host itself"),
    ),
    *_rows(
        "mpirun",
        ("-np -n", WORLD),
        ("--hostfile -hostfile --machinefile -machinefile", HOSTFILE),
        ("-H --host -host -hosts", HOSTS),  # -hosts: MPICH's
        ("-npernode --npernode -N -ppn", NPROC),
        (
            "-mca --mca",
            "not needed: clusterlaunch starts torchrun, not MPI; NCCL and gloo read their "
            "settings from variables (--env NCCL_SOCKET_IFNAME=eth0)",
        ),
        (
            "-bind-to --bind-to",
            'with CUDA GPUs, use --torchrun-args="--numa-binding node" (CPUs near each GPU; '
            "on a CPU-only host every rank fails: Torch not compiled with CUDA)",
        ),
        ("-map-by --map-by -rf --rankfile -rankfile", RANK_ORDER),
        ("-oversubscribe --oversubscribe", "not needed: gpus: N may exceed a host's cores"),
        ("-x -genv -env", ENV),  # -genv, -env: MPICH's
        ("-wdir --wdir", "use --workdir DIR or workdir: in the hosts file"),
        (
            "--allow-run-as-root -allow-run-as-root",
            "not needed: each host runs the job as the user clusterlaunch logs in as, root too",
        ),
        (
            "--tag-output -tag-output",
            "not needed: every line starts with its rank and host ([r1 node1:0])",
        ),
        (
            "--report-bindings -report-bindings",
            'not needed: clusterlaunch binds no CPUs (with CUDA GPUs: --torchrun-args="--numa-'
            'binding node")',
        ),
        ("--display-map -display-map", "use --dry-run: each host's ranks, devices and command"),
    ),
    *_rows(
        "pdsh",
        ("-w", HOSTS),
        ("-l", "use user: in the hosts file, or User in your SSH config"),
        ("-f", "use --fanout N (connections opened at once)"),
        ("-u", "use --timeout SECONDS (the whole job's wall-clock limit)"),
        ("-R", "not needed: clusterlaunch connects over SSH itself (--ssh-client)"),
    ),
)


def equivalent(word: str, own: Collection[str] = ()) -> str | None:
    """One line for an unknown option ``word`` (``--nproc_per_node=4``), or ``None``.

    A flag two tools spell alike with different meanings (``-H``) names both. ``own``:
    the command's options, whose prefixes are no other torchrun option's (``--e``).
    """
    name = word.split("=", 1)[0]
    found = [flag for flag in TABLE if name in flag.flags]
    full = name if found else _torchrun_spelling(word, own)
    found = found or [flag for flag in TABLE if flag.tool == "torchrun" and full in flag.flags]
    texts = list(dict.fromkeys(flag.clusterlaunch.format(flag=full) for flag in found))
    if not texts:
        return None
    if len(texts) == 1:
        return f"{name}: {texts[0]}"
    return f"{name}: " + "; ".join(f"as {flag.tool}'s, {flag.clusterlaunch}" for flag in found)


# torchrun's -r and -t with their value attached, as its argparse reads -r3, -t=0:3,1:2.
_ATTACHED = re.compile(r"-([rt])=?[0-9][0-9:,]*")


def _torchrun_spelling(word: str, own: Collection[str]) -> str | None:
    """The table's spelling of the torchrun option ``word`` names by a prefix or with
    a value attached (``--nproc``: ``--nproc-per-node``; ``-t3``: ``-t``), or ``None``."""
    attached = _ATTACHED.fullmatch(word)
    if attached:
        return "-" + attached[1]
    option = torchrun_option(word)
    prefix = word.split("=", 1)[0].replace("_", "-")
    if option is None or (option not in own and any(o.startswith(prefix) for o in own)):
        return None  # --e: --env's prefix too, though torchrun's argparse reads --event-...
    underscored = "--" + option[2:].replace("-", "_")
    flags = {name for flag in TABLE if flag.tool == "torchrun" for name in flag.flags}
    return option if option in flags else underscored if underscored in flags else None


def markdown(rows: Iterable[Flag] = TABLE) -> str:
    """The flag tables of docs/coming-from.md, one per tool."""
    rows = list(rows)
    parts: list[str] = []
    for tool in dict.fromkeys(flag.tool for flag in rows):
        parts += [f"### {tool}", "", f"| {tool} | clusterlaunch |", "| --- | --- |"]
        for flag in (f for f in rows if f.tool == tool):
            names = ", ".join(f"`{name}`" for name in flag.flags)
            parts.append(f"| {names} | {flag.clusterlaunch.format(flag='OPTION')} |")
        parts.append("")
    return "\n".join(parts)
