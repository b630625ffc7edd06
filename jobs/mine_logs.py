"""``spark-submit jobs/mine_logs.py ...``: a shim that runs :mod:`solaris_lib.jobs.mine_logs`, the job
shipped inside the package (the DAGs submit the package's module file itself)."""

import sys

from solaris_lib.jobs.mine_logs import main

if __name__ == "__main__":
    sys.exit(main())
