"""``python -m clusterlaunch``."""

from clusterlaunch.cli.main import main

raise SystemExit(main())
