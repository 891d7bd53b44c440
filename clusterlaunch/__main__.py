"""``python -m clusterlaunch``."""

from clusterlaunch.cli.main import script

script()
