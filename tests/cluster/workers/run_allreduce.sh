#!/bin/sh
# For clusterlaunch run --no-python: torchrun runs this program itself, not through python.
exec "$WORKER_PYTHON" allreduce.py "$@"
