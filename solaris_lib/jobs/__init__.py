"""The Spark jobs, shipped inside the package: one module per job, each a module entry point
(``python -m solaris_lib.jobs.mine_logs ...``) and the file the DAGs hand to ``spark-submit``
(:func:`solaris_lib.orchestration.dagspec.job_path`). Every job runs on
:mod:`solaris_lib.orchestration.jobrunner`.

``python-runner.jar`` is an empty jar: in Spark standalone cluster deploy mode, where
``spark-submit`` refuses Python applications, the DAGs submit it with the class
``org.apache.spark.deploy.PythonRunner`` (what ``spark-submit`` itself runs for a Python driver)
and the job's module file as PythonRunner's first argument (docs/scaling.md).
"""

JOBS = ("mine_logs", "speculate", "infer_embeddings", "evaluate", "publish_cache",
        "train_retrieval", "train_foundation")
