"""``doctor --bandwidth``: a real all_reduce job, started the way ``clusterlaunch run`` starts one.

The worker (``remote/allreduce_bench.py``) travels as ``python -c`` source
with ``--no-python``, so nothing is written to the hosts' workdirs; the job
goes through the same preflight, torchrun and supervisor as any other job,
which is the point: a hang here is the hang a real job would have.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from typing import Any

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.launcher import launch, make_plan
from clusterlaunch.controller.request import JobRequest
from clusterlaunch.core import defaults
from clusterlaunch.core.doctor import all_reduce_rows
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.planner import new_job_id

MARK = b"@@allreduce "


def bench_source() -> str:
    return resources.files("clusterlaunch.remote").joinpath("allreduce_bench.py").read_text()


def run_all_reduce(
    request: JobRequest, pythons: Sequence[str], sizes: Sequence[int] = defaults.DOCTOR_SIZES
) -> dict[str, Any]:
    """all_reduce over every host (one rank per GPU, else per ``gpus:``); rows as nccl-tests."""
    if len(set(pythons)) != 1:
        raise UsageError(
            "doctor --bandwidth: the hosts use different python: paths "
            f"({', '.join(sorted(set(pythons)))}); give one with --python"
        )
    options = replace(
        request.options,
        script=pythons[0],
        script_kind="program",
        script_args=("-c", bench_source(), *(str(size) for size in sizes)),
    )
    # Bounded: a collective that cannot connect would otherwise wait out gloo's 30 min.
    timeout = defaults.DOCTOR_BENCH_TIMEOUT_S
    bench = replace(request, options=options, exec_argv=None, job_id=new_job_id(), timeout=timeout)
    out = io.BytesIO()
    err = io.BytesIO()
    outcome = launch(bench, make_plan(bench), Console(out, err))
    found = [line for line in out.getvalue().splitlines() if MARK in line]
    if outcome.exit_code != 0 or not found:
        tail = (err.getvalue() + out.getvalue()).decode("utf-8", "replace").strip()
        lines = tail.splitlines()[-8:]
        return {"error": f"the all_reduce job failed (exit {outcome.exit_code})", "tail": lines}
    result = json.loads(found[-1].split(MARK, 1)[1])
    ranks = int(result["ranks"])
    return {
        "backend": result["backend"],
        "ranks": ranks,
        "rows": all_reduce_rows(result["timings"], ranks),
    }
