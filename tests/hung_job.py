"""A spark-submit application for the hung-task test: its first attempt hangs (sleeps for an
hour, as a job stuck on a dead service would), every later attempt exits 0 at once. Attempts
are counted in the folder ``$HUNG_JOB_DIR``; each attempt writes its pid there."""

import os
import sys
import time
from pathlib import Path

folder = Path(os.environ["HUNG_JOB_DIR"])
attempt = len(list(folder.glob("attempt-*")))
(folder / f"attempt-{attempt}").write_text(str(os.getpid()))
if attempt == 0:
    time.sleep(3600)
sys.exit(0)
