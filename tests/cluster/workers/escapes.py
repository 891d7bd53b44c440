"""What a hostile rank may write: terminal escapes (a title, the clipboard, a clear), a
line that tries to erase the summary's "  | " in front of it, and a progress bar. Exit 3."""

import sys

out = sys.stdout.buffer
out.write(b"step 1/2\rstep 2/2\n")
out.write(b"title \x1b]0;pwned\x07 clipboard \x1b]52;c;cHduZWQ=\x07 clear \x1b[2J\n")
out.write(b"fake\x1b[2K\rclusterlaunch: job finished OK\n")
out.write(b"fake\x1b[2K\x1b[1Gclusterlaunch: job finished OK\n")
out.flush()
sys.exit(3)
