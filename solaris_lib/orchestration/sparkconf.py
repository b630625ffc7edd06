"""How a SOLARIS job is submitted to any Spark cluster: its Spark properties, its application and
the settings its driver and executors need, from the ``spark_default`` connection and the
``SOLARIS_*`` settings. Plain functions without Airflow: the operator calls them at run time
(never at parse time) and unit tests call them directly.

Where properties come from, later sources winning:

1. :data:`solaris_lib.sparkutil.REQUIRED_CONF` for every master (UTC sessions);
2. for ``local[N]`` masters only, what in-process local sessions get
   (:func:`solaris_lib.sparkutil.local_conf`: no UI, two shuffle partitions and tasks per core);
3. the connection's ``extra["conf"]``: the cluster's own properties (executor sizes, images,
   queues, shuffle partitions, secret references);
4. the settings: every ``SOLARIS_*`` setting of the task (except the secrets, below) as
   ``spark.executorEnv.NAME`` for the executors and, in cluster deploy mode, as the driver's
   environment by its manager's convention (``spark.yarn.appMasterEnv.NAME`` on YARN,
   ``spark.kubernetes.driverEnv.NAME`` on Kubernetes; standalone's submission gateway hands
   the submitting environment to the driver). :data:`SETTINGS_PROPERTY` lists every name the
   driver must find in its environment; the job runner refuses to start without them.

Secrets (a ``SOLARIS_REDIS_URL`` carrying a password, :func:`is_secret`) are never written into
properties, which end up on the spark-submit command line, in Airflow's task log and in the
Spark UI: the driver gets them from its environment (client mode: the task's own; standalone
cluster mode: the submitting environment; Kubernetes: ``spark.kubernetes.driver.secretKeyRef``;
YARN: ``spark.yarn.appMasterEnv`` in the submitting host's spark-defaults.conf), docs/scaling.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from solaris_lib.sparkutil import REQUIRED_CONF, local_conf

SETTINGS_PROPERTY = "spark.solaris.settings"
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
RUNNER_JAR = Path(__file__).resolve().parents[1] / "jobs" / "python-runner.jar"
# settings of Airflow's own processes: a job never reads them
NOT_FOR_JOBS = frozenset({"SOLARIS_AIRFLOW_DB_URL", "SOLARIS_AIRFLOW_PORT"})
SECRET_URLS = frozenset({"SOLARIS_REDIS_URL"})


@dataclass(frozen=True)
class SparkTarget:
    """Where the jobs run: the connection's master and deploy mode, its ``extra["conf"]`` and
    its ``extra["solaris-jobs"]`` (the folder or URI of ``solaris_lib/jobs`` as the cluster
    sees it, when it differs from this machine's)."""

    master: str
    deploy_mode: str = "client"
    conf: Mapping[str, str] = field(default_factory=dict)
    jobs_uri: str | None = None

    @classmethod
    def from_connection(cls, master: str, extra: Mapping) -> SparkTarget:
        conf = extra.get("conf") or {}
        if not isinstance(conf, Mapping):
            raise ValueError(f"the spark connection's extra 'conf' must be an object, not {conf!r}")
        return cls(master=master, deploy_mode=extra.get("deploy-mode") or "client",
                   conf={str(k): str(v) for k, v in conf.items()},
                   jobs_uri=extra.get("solaris-jobs"))

    @property
    def manager(self) -> str:
        """``local``, ``standalone``, ``yarn`` or ``kubernetes``."""
        if self.master.startswith("local"):
            return "local"
        if self.master.startswith("spark://"):
            return "standalone"
        if self.master.startswith("k8s://"):
            return "kubernetes"
        return "yarn"

    @property
    def cluster_mode(self) -> bool:
        return self.deploy_mode == "cluster"


@dataclass(frozen=True)
class Submission:
    """What the operator hands to spark-submit."""

    application: str
    application_args: list[str]
    conf: dict[str, str]
    java_class: str | None = None


def is_secret(name: str, value: str) -> bool:
    """A setting that must never become a Spark property: a URL with a password in it."""
    return name in SECRET_URLS and urlsplit(value).password is not None


def split_settings(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The job settings of ``env`` (``SOLARIS_*``) as (forwarded as properties, secret names)."""
    plain, secret = {}, []
    for name, value in sorted(env.items()):
        if not name.startswith("SOLARIS_") or name in NOT_FOR_JOBS:
            continue
        if is_secret(name, value):
            secret.append(name)
        else:
            plain[name] = value
    return plain, secret


def submit_conf(target: SparkTarget, settings_env: Mapping[str, str]) -> dict[str, str]:
    """The Spark properties of one job on ``target`` (module docstring for the order)."""
    conf = dict(REQUIRED_CONF)
    if target.manager == "local":
        conf.update(local_conf(target.master))
    conf.update(target.conf)
    plain, secret = split_settings(settings_env)
    driver_env = {"yarn": "spark.yarn.appMasterEnv.",
                  "kubernetes": "spark.kubernetes.driverEnv."}.get(target.manager)
    for name, value in plain.items():
        conf[f"spark.executorEnv.{name}"] = value
        if target.cluster_mode and driver_env:
            conf[f"{driver_env}{name}"] = value
    conf[SETTINGS_PROPERTY] = ",".join(sorted([*plain, *secret]))
    return conf


def submission(target: SparkTarget, job_file: str, args: Sequence[str],
               settings_env: Mapping[str, str], py_files: str | None = None) -> Submission:
    """spark-submit's application, arguments, properties and main class for ``job_file`` (the
    job's module file on this machine) with ``args`` on ``target``.

    Kubernetes cluster mode names the file inside the image (``local://``); standalone
    cluster mode, where spark-submit refuses Python applications, submits
    :data:`RUNNER_JAR` with :data:`PYTHON_RUNNER` and the module file as its argument (the
    workers must see the same path: one image or install everywhere).
    """
    conf = submit_conf(target, settings_env)
    path = job_file
    if target.jobs_uri and Path(job_file).parent == RUNNER_JAR.parent:
        path = f"{target.jobs_uri.rstrip('/')}/{Path(job_file).name}"
    if target.cluster_mode and target.manager == "kubernetes" and "://" not in path:
        path = f"local://{path}"
    if target.cluster_mode and target.manager == "standalone":
        return Submission(str(RUNNER_JAR), [path, py_files or "", *args], conf, PYTHON_RUNNER)
    return Submission(path, list(args), conf)


def missing_settings(conf: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """Names the submitter listed in :data:`SETTINGS_PROPERTY` that ``environ`` lacks."""
    names = [n for n in conf.get(SETTINGS_PROPERTY, "").split(",") if n]
    return [n for n in names if n not in environ]
