"""What the user is told when this controller and a host lost touch (pure).

Two ways: the controller stops hearing a host (its keepalives go unanswered: a
partition, a crash), or a host stops hearing the controller (no heartbeat for
``--heartbeat-timeout``) and ends its part of the job by itself. Which side was
silent decides the words: only the controller knows whether it was suspended.
"""

from __future__ import annotations

from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.exits import ExitStatus


def job_may_run_on(host: str, heartbeat_timeout: float, job_id: str) -> str:
    """For a host lost by its keepalives: nothing it was sent arrived, so its agent
    ends the job there only once it has heard no heartbeat for ``--heartbeat-timeout``."""
    return (
        f"{host}: its part of the job may still be running there: its agent ends it "
        f"after --heartbeat-timeout ({heartbeat_timeout:g} s) without word from this "
        f"controller; clusterlaunch ps HOSTS lists it, clusterlaunch kill HOSTS {job_id} "
        "ends it once the host answers"
    )


def host_stopped_the_job(
    host: str, heartbeat_timeout: float, suspended: bool
) -> tuple[str, JobOutcome]:
    """A host that heard no heartbeat for ``--heartbeat-timeout`` and stopped the job: the
    line to say and the verdict. ``suspended``: this controller was (Ctrl-Z), so it sent
    none; else it kept sending, and what was between it and the host failed."""
    if suspended:  # as the docs show it for Ctrl-Z
        said = (
            f"{host}: the host stopped the job: it heard nothing from this controller for "
            "--heartbeat-timeout seconds (was clusterlaunch suspended?)"
        )
        return said, JobOutcome(ExitStatus.HOST_LOST, "the hosts lost touch with the controller")
    network = f"the network between here and {host}"
    said = (
        f"{host}: the host stopped the job: it heard nothing from this controller for "
        f"--heartbeat-timeout ({heartbeat_timeout:g} s), though the controller was not "
        f"suspended and kept sending: {network} was cut for that long"
    )
    reason = f"{host} lost touch with the controller ({network} was cut)"
    return said, JobOutcome(ExitStatus.HOST_LOST, reason, host=host)
