"""Creates the file named by env MARKER_FILE: proof that the job started."""

import os
import pathlib

pathlib.Path(os.environ["MARKER_FILE"] + "." + os.environ["RANK"]).write_text("started\n")
os._exit(0)
