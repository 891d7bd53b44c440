"""Prints what torchrun and clusterlaunch set for this rank, as JSON (no collective)."""

import json
import os

NAMES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "CLUSTERLAUNCH_JOB_ID",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "FROM_ENV_FILE",
)
print("ENV=" + json.dumps({name: os.environ.get(name) for name in NAMES}), flush=True)
