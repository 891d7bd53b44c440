#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: installs the programs
# the tests run (as root, with apt-get: see scripts/test-programs.sh), torch==2.13.0
# and this package with its test extras, runs the linters, then pytest.  Extra
# arguments go to pytest, e.g.  scripts/test.sh -m "not cluster"  for the fast tier.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
extra=()  # Debian's python3 makes virtual environments only with python3-venv
[ -x .venv/bin/python ] || "$PY" -c 'import ensurepip, venv' 2>/dev/null || extra+=(python3-venv)
# sshd, ip, rsync, munge, Slurm, tmux, a Kerberos KDC: installed when root, else named (and the
# tests that need them skip, saying why).
scripts/test-programs.sh "${extra[@]}"

# A virtual environment that still sees the machine's packages, so an already
# installed torch is reused instead of downloaded again.
[ -x .venv/bin/python ] || "$PY" -m venv --system-site-packages .venv
VPY=.venv/bin/python
# The torch extra pins torch (an unpinned one would pull GBs of CUDA packages)
# and adds numpy; a matching torch already installed is kept.
"$VPY" -m pip install -q -e ".[test,torch]"

"$VPY" -m ruff check .
"$VPY" -m ruff format --check .
"$VPY" -m mypy clusterlaunch benchmarks  # benchmarks too: a broken call there fails no test

# Python's default: compiled modules are cached. With PYTHONDONTWRITEBYTECODE set
# (as some images do), every interpreter the tests start (the CLI, agents, forked
# imports) compiled the package again, and pytest rewrote every test module in each
# worker: the unit tier took 22 s on 2 cores from a clean clone, 18-20 s with caching.
unset PYTHONDONTWRITEBYTECODE
# Hosts started by the suite run jobs with this interpreter (see tests/conftest.py).
export CLUSTERLAUNCH_TEST_PYTHON="$PWD/$VPY"
# Two workers (pytest-xdist; `-n 0` after it runs serially): most of the cluster tier
# waits on handshakes, timeouts and jobs, so two share 2 cores well. loadgroup keeps
# the real Slurm tests on one worker; where -m deselects them all (the fast tier),
# tests/conftest.py schedules with plain load, which hands tests out in batches.
exec "$VPY" -m pytest -n "${CLUSTERLAUNCH_TEST_WORKERS:-2}" --dist loadgroup "$@"
