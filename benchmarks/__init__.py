"""Benchmarks of clusterlaunch against a simulated cluster: ``python -m benchmarks``."""
