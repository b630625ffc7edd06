"""PySpark's Python daemon (``spark.python.daemon.module``, set by ``sparkutil``) without the
traceback of one expected event.

When a task ends before it has read all of a Python worker's output (``limit``, ``take``,
``first`` over a stage with Python code: the rows it needed are in), the JVM closes that
worker's socket. The worker's last flush then raises BrokenPipeError; since Spark 4 the daemon
lets it kill the worker (``spark.python.daemon.killWorkerOnFlushFailure``, right: the stream is
out of step and the worker must not be reused) and prints its traceback on the executor's
stderr, in runs that succeed. Here the worker ends the same way, quietly: any other exception
still surfaces as before.
"""

from pyspark import daemon

_pyspark_worker = daemon.worker


def quiet_worker(sock, authenticated: bool) -> int:
    """``pyspark.daemon.worker``; a closed socket ends the worker (non-zero: never reused)."""
    try:
        return _pyspark_worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1


daemon.worker = quiet_worker

if __name__ == "__main__":
    daemon.manager()
