#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: installs what is
# missing (openssh-server and iproute2 when root, torch==2.13.0, this package
# with its test extras), runs the linters, then pytest. Extra arguments go to
# pytest, e.g.  scripts/test.sh -m "not cluster"   for the fast unit tests only.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        echo "test.sh: please install $* (needs root)" >&2
    fi
}

[ -x /usr/sbin/sshd ] || apt_install openssh-server
command -v ip >/dev/null || apt_install iproute2

# A virtual environment that still sees the machine's packages, so an already
# installed torch is reused instead of downloaded again.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv --system-site-packages .venv 2>/dev/null || {
        apt_install python3-venv
        "$PY" -m venv --system-site-packages .venv
    }
fi
VPY=.venv/bin/python
# Pinned: an unpinned torch would pull several GB of CUDA packages.
"$VPY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch").split("+")[0] != "2.13.0")' 2>/dev/null \
    || "$VPY" -m pip install -q "torch==2.13.0"
"$VPY" -m pip install -q -e ".[test]"

"$VPY" -m ruff check .
"$VPY" -m ruff format --check .
"$VPY" -m mypy clusterlaunch

# Hosts started by the suite run jobs with this interpreter (see tests/conftest.py).
export CLUSTERLAUNCH_TEST_PYTHON="$PWD/$VPY"
exec "$VPY" -m pytest "$@"
