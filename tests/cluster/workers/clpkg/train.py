"""``python -m clpkg.train``: the all-reduce worker, started as a module."""

import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "allreduce.py"), run_name="__main__")
