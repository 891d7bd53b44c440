"""Prints the variables named on its command line, as JSON (how variables travel)."""

import json
import os
import sys

print("VARS=" + json.dumps({name: os.environ.get(name) for name in sys.argv[1:]}), flush=True)
