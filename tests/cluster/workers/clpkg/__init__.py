"""A package for ``clusterlaunch run -m HOSTS clpkg.train`` (tests/cluster/test_interface.py)."""
