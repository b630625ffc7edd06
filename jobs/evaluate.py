"""``spark-submit jobs/evaluate.py ...``: a shim that runs :mod:`solaris_lib.jobs.evaluate`, the job
shipped inside the package (the DAGs submit the package's module file itself)."""

import sys

from solaris_lib.jobs.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
