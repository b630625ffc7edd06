"""spark-submit entrypoint: embed one interval's speculated pairs with the serving model.

    spark-submit solaris_lib/jobs/infer_embeddings.py --start 2026-01-05T10:00 --end 2026-01-05T11:00
        [--model-version V] [--batch-users N]

Reads ``speculated/interval=KEY`` and ``mined/user_history/interval=KEY`` under
``SOLARIS_DATA_ROOT`` and writes ``embeddings/interval=KEY`` (user_id, item_id, model_version,
embedding fp16) atomically, then (unless ``SOLARIS_FALLBACK_CLUSTERS=0``) the hierarchical
fallback's ``embeddings/cluster``, ``embeddings/item_clusters`` and ``embeddings/item_prior``
partitions (``solaris_lib.model.fallback``). Prints the report as one JSON line; exit code 0
on success, 2 when an input partition or the model is missing, 5 when the model's outputs are
not finite.
"""

import sys

from solaris_lib.model.commands import add_infer_arguments, infer_request
from solaris_lib.orchestration.jobrunner import Job, run_job


def _run(spark, settings, request):
    from solaris_lib.model.fallback import embed_interval

    return embed_interval(spark, settings, request)


JOB = Job("infer-embeddings", __doc__, lambda args, settings: infer_request(args), _run,
          add_infer_arguments)


def main(argv=None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
