"""Capacity plan: the cluster a deployment needs at 1M, 100M and 1B daily users, from per-unit
figures measured in this run (or read from the other benchmarks' saved last lines).

Per-unit figures, each from the benchmark that measures it (its last JSON line):

* speculation core-us per log row: ``speculation_scale.py`` (marginal: the extra seconds of the
  large world over the small one per extra row, times the ``local[N]`` master's cores);
* inference pairs/s per CPU core and FLOPs per pair: ``inference.py`` (shared-history path,
  fp32, one torch thread, as many targets per user as the budget);
* inference pairs/s per GPU: ``inference.py``'s bf16 figure when it ran on CUDA; otherwise an
  ASSUMPTION: ``--gpu-tflops`` sustained TFLOP/s divided by the measured FLOPs per pair;
* publish pairs/s per core and writes/s one Redis server absorbed: ``cache_fill.py``;
* Redis bytes per pair and server us per lookup: ``lookup.py`` (the shipped layout).

By default each benchmark runs here as a subprocess with small arguments (several minutes);
``--results DIR`` reads ``DIR/<benchmark>.json`` instead (saved last lines, e.g. an
``inference.json`` from a GPU machine); ``--save DIR`` keeps this run's. The plan itself is
:mod:`solaris_lib.capacity`; the assumptions and a table: docs/capacity.md.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from solaris_lib.capacity import (
    Assumptions,
    Scale,
    UnitCosts,
    crossover_budget,
    per_budget_pair,
    plan,
)

HERE = Path(__file__).resolve().parent
SMALL_RUNS = {  # benchmark -> arguments of the in-run measurement
    "speculation_scale": ["--quick"],
    "inference": ["--users", "4", "--items", "200", "--repeats", "2", "--threads", "1"],
    "cache_fill": ["--users", "1000", "--per-user", "200", "--items", "8000"],
    "lookup": ["--no-fm", "--users", "300", "--calls", "600", "--warmup", "100", "--timeout-ms", "1000"],
}
USERS = {"1M": 1e6, "100M": 1e8, "1B": 1e9}
RESP_BYTES_PER_FIELD = 24  # item id as a decimal field + RESP framing of field and value


def measured(name: str, results: Path | None, save: Path | None) -> dict:
    """The last JSON line of ``benchmarks/<name>.py``: saved under ``results`` or run now (and
    then kept under ``save`` when given, for a later ``--results``)."""
    if results is not None:
        return json.loads((results / f"{name}.json").read_text().strip().splitlines()[-1])
    print(f"capacity: running {name}.py {' '.join(SMALL_RUNS[name])}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *SMALL_RUNS[name]],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"capacity: {name}.py failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # what else ran meanwhile: on a shared machine the per-unit figures are pessimistic
    result["capacity_run"] = {"seconds": round(time.perf_counter() - started),
                              "load_average_1m_after": os.getloadavg()[0]}
    print(f"capacity: {name}.py: {result['capacity_run']}", file=sys.stderr)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        (save / f"{name}.json").write_text(json.dumps(result) + "\n")
    return result


def master_cores(master: str) -> int:
    """Cores of a ``local[N]`` master (``local[*]``: this machine's); 1 for any other."""
    found = re.fullmatch(r"local\[(\d+|\*)\]", master)
    if found is None:
        return 1
    return (os.cpu_count() or 1) if found.group(1) == "*" else int(found.group(1))


def speculation_cost(spec: dict) -> tuple[float, dict]:
    """Core-us per lookback row: marginal between the two worlds (average when the marginal
    is not positive, as on a machine whose load changed between the two)."""
    cores = master_cores(spec["master"])
    small, large = spec["small"], spec["large"]
    marginal = (large["seconds"] - small["seconds"]) / max(1, large["rows"] - small["rows"])
    average = large["seconds"] / large["rows"]
    per_row = (marginal if marginal > 0 else average) * 1e6 * cores
    return per_row, {"master": spec["master"], "cores": cores,
                     "rows": [small["rows"], large["rows"]],
                     "seconds": [small["seconds"], large["seconds"]],
                     "marginal_core_us_per_row": round(marginal * 1e6 * cores, 2),
                     "average_core_us_per_row": round(average * 1e6 * cores, 2),
                     "used": "marginal" if marginal > 0 else "average"}


def gpu_rate(inf: dict, gpu_tflops: float) -> tuple[float, dict]:
    """Pairs/s of one GPU: measured (CUDA, bf16) or assumed from the FLOPs per pair."""
    if inf["device"].startswith("cuda"):
        return inf["pairs_per_s_shared_bf16"], {"source": f"measured on {inf['device']} (bf16)"}
    rate = gpu_tflops * 1e12 / inf["flops_per_pair"]
    return rate, {"source": "ASSUMED (no GPU measured): --gpu-tflops sustained TFLOP/s over "
                            "the FLOPs per pair measured on CPU",
                  "gpu_tflops_assumed": gpu_tflops, "flops_per_pair": inf["flops_per_pair"]}


def unit_costs(runs: dict[str, dict], gpu_tflops: float) -> tuple[UnitCosts, dict]:
    """The per-unit figures and how each was derived."""
    inf, fill = runs["inference"], runs["cache_fill"]
    look = runs["lookup"]["layouts"]["shipped"]  # the shipped layout's full figures
    payload = runs["lookup"]["payload_bytes"]  # one fp16 embedding
    per_row, speculation = speculation_cost(runs["speculation_scale"])
    per_gpu, gpu = gpu_rate(inf, gpu_tflops)
    costs = UnitCosts(
        speculation_core_us_per_row=per_row,
        inference_pairs_per_s_cpu_core=inf["pairs_per_s_shared"] / inf["threads"],
        inference_pairs_per_s_gpu=per_gpu,
        publish_pairs_per_s_core=fill["publish_pairs_per_s"] / fill["partitions"],
        redis_bytes_per_pair=look["bytes_per_pair"],
        redis_write_pairs_per_s=fill["raw_pairs_per_s"],
        lookup_server_us=look["server_us_per_hmget"] * look["hmgets_per_call"],
        wire_bytes_per_pair=payload + RESP_BYTES_PER_FIELD)
    derivation = {
        "runs": {name: run.get("capacity_run") for name, run in runs.items()},
        "speculation": speculation,
        "inference_cpu": {"device": inf["device"], "threads": inf["threads"],
                          "preset": inf["preset"], "history": inf["history"],
                          "targets_per_user": inf["items_per_user"],
                          "pairs_per_s": inf["pairs_per_s_shared"]},
        "inference_gpu": gpu,
        "publish": {"pairs_per_s": fill["publish_pairs_per_s"], "cores": fill["partitions"],
                    "raw_pairs_per_s_one_server": fill["raw_pairs_per_s"], "dim": fill["dim"]},
        "lookup": {"payload_bytes": payload, **{k: look[k] for k in (
            "client_p50_us", "client_p99_us", "server_us_per_hmget", "hmgets_per_call",
            "bytes_per_pair")}},
    }
    return costs, derivation


def examples(options, costs: UnitCosts, assume: Assumptions) -> dict:
    rows = {}
    for label, users in USERS.items():
        scale = Scale(users, options.requests_per_user, options.candidates, options.budget,
                      options.interval_h)
        rows[label] = {**plan(scale, costs, assume).as_dict(),
                       "per_budget_pair": {k: round(v, 6) for k, v in
                                           per_budget_pair(scale, costs, assume).items()},
                       "crossover_budget": round(crossover_budget(scale, costs, assume), 1)}
        row = rows[label]
        print(f"{label:>5} users: {row['spark_cores']:>11,.0f} Spark cores  "
              f"{row['inference_gpu_hours']:>9,.2f} GPU-hours/interval  "
              f"{row['redis_gb']:>9,.0f} GB Redis in {row['redis_shards']:>5,} shards  "
              f"{row['write_mb_per_s']:>8,.0f} MB/s writes; binds: {row['binding']}",
              file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=None,
                        help="folder of saved last lines: <benchmark>.json")
    parser.add_argument("--save", type=Path, default=None,
                        help="keep the measured last lines here (<benchmark>.json)")
    parser.add_argument("--requests-per-user", type=float, default=10.0, help="per day")
    parser.add_argument("--candidates", type=float, default=100.0, help="per request")
    parser.add_argument("--budget", type=int, default=200, help="pairs per user and interval")
    parser.add_argument("--interval-h", type=float, default=1.0)
    parser.add_argument("--gpu-tflops", type=float, default=5.0,
                        help="ASSUMED sustained TFLOP/s of one GPU on this model, used only "
                             "when the inference figure was not measured on CUDA")
    options = parser.parse_args()
    runs = {name: measured(name, options.results, options.save) for name in SMALL_RUNS}
    costs, derivation = unit_costs(runs, options.gpu_tflops)
    assume = Assumptions()
    print(json.dumps({"benchmark": "capacity", "source": str(options.results or "measured"),
                      "unit_costs": asdict(costs), "derivation": derivation,
                      "assumptions": asdict(assume),
                      "scale": {"requests_per_user_day": options.requests_per_user,
                                "candidates_per_request": options.candidates,
                                "budget_per_user": options.budget,
                                "interval_h": options.interval_h},
                      "examples": examples(options, costs, assume)}))


if __name__ == "__main__":
    main()
