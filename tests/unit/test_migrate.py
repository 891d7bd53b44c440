"""Other launchers' flags get one line naming clusterlaunch's way; docs/coming-from.md agrees."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.cli.main import build_parser, main
from clusterlaunch.cli.passthrough import _subparser, foreign_option
from clusterlaunch.core import migrate, torchrunargs

DOC = Path(__file__).resolve().parents[2] / "docs" / "coming-from.md"
BEGIN, END = "<!-- begin flag tables -->\n", "<!-- end flag tables -->"


def test_the_doc_shows_exactly_the_table() -> None:
    text = DOC.read_text()
    generated = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert generated == migrate.markdown() + "\n", "regenerate with migrate.markdown()"


def test_every_tool_is_in_the_table() -> None:
    assert {flag.tool for flag in migrate.TABLE} == {
        "torchrun",
        "DeepSpeed",
        "accelerate",
        "mpirun",
        "pdsh",
    }


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["run", "--nproc-per-node", "8", "h.yaml", "t.py"],
            "--nproc-per-node: use gpus: in the hosts file or --gpus-per-host (N or auto)",
        ),
        (
            ["run", "--nproc_per_node=8", "h.yaml", "t.py"],
            "--nproc_per_node: use gpus: in the hosts file or --gpus-per-host (N or auto)",
        ),
        (["run", "h.yaml", "--nnodes", "2", "t.py"], "--nnodes: list the hosts in the hosts file"),
        (["run", "--max_restarts", "3", "h.yaml", "t.py"], "--max_restarts: use --max-restarts N"),
        (["run", "--hostfile", "hf", "t.py"], "--hostfile: give the hosts file as HOSTS"),
        (["run", "-H", "hf", "t.py"], "-H: as DeepSpeed's, give the hosts file as HOSTS"),
        (["exec", "-i", "w0", "hf", "ls"], "-i: use --include (the same syntax"),
        (["check", "-e", "w0", "hf"], "-e: use --exclude"),
        (["run", "--num_nodes", "1", "hf", "t.py"], "--num_nodes: use --include"),
        (["run", "--num_gpus", "1", "hf", "t.py"], "--num_gpus: use --gpus-per-host N"),
        (["run", "--master_addr", "x", "hf", "t.py"], "--master_addr: use --master-addr"),
        (["exec", "-m", "hf", "ls"], "-m: use clusterlaunch run -m HOSTS MODULE"),
        (["run", "--no_python", "hf", "t"], "--no_python: use clusterlaunch run --no-python"),
        (["run", "--num_processes", "8", "hf", "t"], "--num_processes: use gpus: per host"),
        (["run", "--main_process_ip", "x", "hf", "t"], "--main_process_ip: use --master-addr"),
        (["run", "-np", "8", "hf", "t.py"], "-np: use gpus: per host in the hosts file"),
        (["run", "-x", "NCCL_DEBUG", "hf", "t.py"], "-x: use --env KEY=VALUE, --env-file FILE"),
        # argparse read -mca as -m with 'ca' attached: "ignored explicit argument 'ca'".
        (["run", "-mca", "btl", "tcp", "hf", "t.py"], "-mca: not needed: clusterlaunch starts"),
        (["run", "-map-by", "node", "hf", "t.py"], "-map-by: ranks follow the hosts file"),
        (["run", "-N", "2", "hf", "t.py"], "-N: use gpus: in the hosts file"),
        # torchrun's own spellings: argparse takes a unique prefix and -t/-r's value attached.
        (["run", "-t3", "hf", "t.py"], "-t3: use --log-dir DIR"),
        (["run", "-r3", "hf", "t.py"], "-r3: use --log-dir DIR"),
        (["run", "-t=0:3,1:2", "hf", "t.py"], "-t: use --log-dir DIR"),
        (["run", "--nproc", "2", "hf", "t.py"], "--nproc: use gpus: in the hosts file"),
        (["run", "--nproc_per=2", "hf", "t.py"], "--nproc_per: use gpus: in the hosts file"),
        (["run", "--max-r", "2", "hf", "t.py"], "--max-r: use --max-restarts N"),
        (
            ["run", "--star", "fork", "hf", "t.py"],
            '--star: torchrun\'s own: pass it with --torchrun-args="--start-method VALUE"',
        ),
        (
            ["run", "--monitor-interval", "1", "hf", "t.py"],
            "--monitor-interval: torchrun's own: pass it with --torchrun-args=\"--monitor-interval",
        ),
        # MPICH's -hosts was read as -h with 'osts' attached: "ignored explicit argument".
        (["run", "-hosts", "n0,n1", "hf", "t.py"], "-hosts: write the hosts in a hosts file"),
        (["run", "--allow-run-as-root", "hf", "t.py"], "--allow-run-as-root: not needed"),
        (["run", "-tag-output", "hf", "t.py"], "-tag-output: not needed: every line starts"),
        (["run", "--report-bindings", "hf", "t.py"], "--report-bindings: not needed: clust"),
        (["run", "-display-map", "hf", "t.py"], "-display-map: use --dry-run"),
        (["run", "-rf", "ranks.txt", "hf", "t.py"], "-rf: ranks follow the hosts file"),
        (["run", "-genv", "A", "1", "hf", "t.py"], "-genv: use --env KEY=VALUE"),
        (["run", "-w", "n[1-2]", "hf", "t.py"], "-w: write the hosts in a hosts file"),
        (["exec", "-f", "8", "hf", "ls"], "-f: use --fanout N"),
        (["run", "--ssh", "2222", "hf", "t.py"], "--ssh: use port: in the hosts file"),
        (["run", "--venv_script", "v", "hf", "t.py"], "--venv_script: use setup: source VENV"),
        (
            ["run", "--mixed_precision", "bf16", "hf", "t.py"],
            "--mixed_precision: use --env ACCELERATE_MIXED_PRECISION=bf16",
        ),
        (
            ["run", "--num_cpu_threads_per_process", "4", "hf", "t.py"],
            "--num_cpu_threads_per_process: use --env OMP_NUM_THREADS=N",
        ),
        (
            ["run", "--use_deepspeed", "hf", "t.py"],
            "--use_deepspeed: use --env ACCELERATE_USE_DEEPSPEED=true",
        ),
        (["run", "--use_fsdp", "hf", "t.py"], "--use_fsdp: use --env ACCELERATE_USE_FSDP=true"),
        (
            ["run", "--dynamo_backend", "x", "hf", "t.py"],
            "--dynamo_backend: use --env ACCELERATE_DYNAMO_BACKEND=",
        ),
        (
            ["run", "--main_training_function", "m", "hf", "t.py"],
            "--main_training_function: not needed (TPU pods only)",
        ),
        (["run", "--same_network", "hf", "t.py"], "--same_network: not needed: every node"),
        (
            ["run", "--deepspeed_config_file", "d.json", "hf", "t.py"],
            "--deepspeed_config_file: use --env ACCELERATE_DEEPSPEED_CONFIG_FILE=F with",
        ),
    ],
)
def test_foreign_flags_get_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"clusterlaunch: error: {line}"), captured.err
    assert captured.err.count("\n") == 1


def test_our_own_flags_and_their_values_are_never_foreign() -> None:
    parser = build_parser()
    words = ["run", "--env", "-x", "--master-addr", "a", "-m", "--include", "w0", "hf", "pkg"]
    assert foreign_option(parser, words) is None
    assert foreign_option(parser, ["run", "hf", "t.py", "--", "--nnodes"]) is None
    assert foreign_option(parser, ["check", "--grace", "1", "hf"]) is None  # argparse's turn


def test_unknown_flags_outside_the_table_keep_argparses_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "--grace", "1", "hf"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "clusterlaunch: error: unrecognized arguments: --grace (see clusterlaunch check --help)\n"
    )


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["stacks", "--env", "A=1", "h.yaml", "j"], "stacks"),
        (["check", "h.yaml", "t.py", "--", "x"], "check"),  # argparse's own extras
        (["kill", "h.yaml", "j", "extra"], "kill"),
        (["sandbox", "up", "--bogus"], "sandbox up"),
        (["run", "--e", "x", "h.yaml", "t.py"], "run"),  # --env's prefix: not torchrun's --event-
    ],
)
def test_a_parse_error_names_the_commands_help(
    argv: list[str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It named ``clusterlaunch --help``, which lists the commands, not their options."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("clusterlaunch: error: unrecognized arguments: "), err
    assert err.endswith(f" (see clusterlaunch {command} --help)\n") and err.count("\n") == 1


def test_every_prefix_torchruns_argparse_takes_gets_a_line() -> None:
    """``--nproc 2`` is torchrun's --nproc-per-node to its argparse (a unique prefix)."""
    options = [o for o in torchrunargs.TORCHRUN_OPTIONS if o != "--help"]
    for option in options:
        for end in range(3, len(option) + 1):
            prefix = option[:end]
            if [o for o in options if o.startswith(prefix)] == [option]:
                for spelled in (prefix, "--" + prefix[2:].replace("-", "_")):
                    assert migrate.equivalent(spelled) is not None, spelled


def test_every_torchrun_option_is_ours_or_gets_a_line() -> None:
    """Ground truth: torch's own parser. An option torchrun users type that
    clusterlaunch neither takes nor names got argparse's bare "unrecognized"."""
    torchrun = pytest.importorskip("torch.distributed.run")
    ours = {o for a in _subparser(build_parser(), "run")._actions for o in a.option_strings}
    theirs = {o for a in torchrun.get_args_parser()._actions for o in a.option_strings}
    assert len(theirs) > 50  # torch 2.13 has 59
    missing = sorted(o for o in theirs if o not in ours and migrate.equivalent(o) is None)
    assert missing == []


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["run", "--rdzv-id", "x", "hf", "t.py"], "--rdzv-id: clusterlaunch uses the job id; pass"),
        (
            ["run", "--role=r", "hf", "t.py"],
            '--role: torchrun\'s own: pass it with --torchrun-args="--role VALUE"',
        ),
        (
            ["run", "--start_method", "spawn", "hf", "t.py"],
            '--torchrun-args="--start_method VALUE"',
        ),
        (["run", "--virtual-local-rank", "hf", "t.py"], '--torchrun-args="--virtual-local-rank"'),
        (
            ["run", "--rdzv-conf", "a=b", "hf", "t.py"],
            '--rdzv-conf: torchrun\'s own: pass it with --torchrun-args="--rdzv-conf VALUE"',
        ),
    ],
)
def test_torchruns_own_options_point_to_torchrun_args(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert line in err and err.count("\n") == 1, err


# Every option of DeepSpeed's launcher (deepspeed/launcher/runner.py, parse_args,
# as of DeepSpeed 0.16): DeepSpeed is not installed here, so the list is written out.
DEEPSPEED_OPTIONS = [
    "-H",
    "--hostfile",
    "-i",
    "--include",
    "-e",
    "--exclude",
    "--num_nodes",
    "--min_elastic_nodes",
    "--max_elastic_nodes",
    "--num_gpus",
    "--num_accelerators",
    "--master_port",
    "--master_addr",
    "--node_rank",
    "--launcher",
    "--launcher_args",
    "--module",
    "--no_python",
    "--no_local_rank",
    "--no_ssh",
    "--no_ssh_check",
    "--force_multi",
    "--save_pid",
    "--enable_each_rank_log",
    "--autotuning",
    "--comment",
    "--account",
    "--elastic_training",
    "--bind_cores_to_rank",
    "--bind_core_list",
    "--ssh_port",
]


def test_every_deepspeed_option_is_ours_or_gets_a_line() -> None:
    ours = {o for a in _subparser(build_parser(), "run")._actions for o in a.option_strings}
    missing = [o for o in DEEPSPEED_OPTIONS if o not in ours and migrate.equivalent(o) is None]
    assert missing == []


@pytest.mark.parametrize("flag", ["--bind-to", "--bind_core_list", "--bind_cores_to_rank"])
def test_numa_binding_is_offered_only_for_cuda_gpus(flag: str) -> None:
    """torchrun's --numa-binding asks CUDA for each GPU's NUMA node: on a CPU-only host
    every rank died with "Torch not compiled with CUDA enabled"."""
    hint = migrate.equivalent(flag)
    assert hint is not None and "--numa-binding" in hint
    assert "with CUDA GPUs" in hint and "CPU-only host every rank fails" in hint


@pytest.mark.parametrize("command", ["kill", "ps", "stacks"])
def test_a_foreign_option_points_only_to_options_the_command_has(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kill -x FOO=1`` said ``use --env KEY=VALUE, ...``, which kill rejects in turn."""
    words = [command, "-x", "FOO=1", "hosts.yaml", *(["j"] if command != "ps" else [])]
    assert main(words) == 2
    assert capsys.readouterr().err == (
        f"clusterlaunch: error: -x: clusterlaunch {command} takes no environment; "
        f"see clusterlaunch {command} --help\n"
    )
    assert (
        foreign_option(build_parser(), ["run", "-x", "FOO=1", "h", "t.py"]) == f"-x: {migrate.ENV}"
    )
