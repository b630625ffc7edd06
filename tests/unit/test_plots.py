"""Plots go through matplotlib's object API: the caller's backend is never switched and pyplot's
global state (figures, backend) is never touched."""

import subprocess
import sys

PROBE = r"""
import json, sys
import matplotlib
matplotlib.use("svg")  # the caller's choice
from solaris_lib.evaluation.speculation import plot_coverage_curves
from solaris_lib.transfer.output import ORDER, plot

out = sys.argv[1]
plot_coverage_curves({"solaris": [{"budget": 1, "coverage": 0.2}, {"budget": 4, "coverage": 0.5}]},
                     out + "/curve.png", "test")
report = {"logloss": {n: 0.5 for n in ORDER}, "auc": {n: 0.7 for n in ORDER},
          "coverage_by_level": {"exact": 0.6, "cluster": 0.2, "item": 0.1, "miss": 0.1}}
plot(report, out + "/transfer.png")
print(json.dumps({"backend": matplotlib.get_backend(), "pyplot": "matplotlib.pyplot" in sys.modules}))
"""


def test_plots_keep_the_callers_backend_and_write_pngs(tmp_path):
    import json

    run = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"backend": "svg", "pyplot": False}
    for name in ("curve.png", "transfer.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
