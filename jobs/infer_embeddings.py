"""``spark-submit jobs/infer_embeddings.py ...``: a shim that runs :mod:`solaris_lib.jobs.infer_embeddings`, the job
shipped inside the package (the DAGs submit the package's module file itself)."""

import sys

from solaris_lib.jobs.infer_embeddings import main

if __name__ == "__main__":
    sys.exit(main())
