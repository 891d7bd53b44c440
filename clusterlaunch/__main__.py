"""``python -m clusterlaunch``."""

from clusterlaunch.cli import main

raise SystemExit(main())
