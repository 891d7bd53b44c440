"""clusterlaunch: one command for a multi-machine PyTorch job.

Plans ranks from a hosts file, starts torchrun (static rendezvous) on every
host over SSH, streams every rank's output with its global rank, and tears the
whole job down on every host when one rank fails, a host is lost, or you press
Ctrl-C.
"""

__version__ = "0.1.0"
