"""A Prometheus scrape of a process running the lookup client: exactly the metric names
docs/cache-client.md documents, with values that follow the lookups it served, and the breaker
of a node that stopped answering."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from solaris_lib.devtools.redis_server import free_port
from tests.cachespec import put_version

pytestmark = [pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[3]
V1 = "20260105T100000Z-aaaaaaaaaa"
CLIENT_PROCESS = r"""
import sys
from prometheus_client import start_http_server
from solaris_lib.client import SolarisClient
from solaris_lib.client.metrics import register

url, prefix, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = SolarisClient.from_url(url, key_prefix=prefix, timeout_ms=2000, refresh_interval_s=60)
register(client, name="ranker")
start_http_server(port, addr="127.0.0.1")
print("ready", flush=True)
for line in sys.stdin:  # "N": N lookups of user 7, items 1, 2 (published) and 3 (not)
    for _ in range(int(line)):
        client.lookup(7, [1, 2, 3])
    print("done", flush=True)
"""


def documented_names() -> set[str]:
    text = (ROOT / "docs" / "cache-client.md").read_text()
    section = text.split("### Metrics (Prometheus)", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(solaris_client_\w+)` \|", section, re.MULTILINE))


def scrape(port: int) -> dict[str, float]:
    """Every sample as ``name{label="value",...}`` -> value (labels sorted)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def exposed_names(samples: dict[str, float]) -> set[str]:
    names = {key.split("{")[0] for key in samples if key.startswith("solaris_client_")}
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in names}


@pytest.fixture
def client_process(private_redis):
    server = private_redis()
    import redis

    r = redis.Redis.from_url(server.url)
    put_version(r.execute_command, "prom", V1, {7: {1: [1, 2], 2: [0.5, -4]}}, dim=2)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", CLIENT_PROCESS, server.url, "prom", str(port)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"

    def lookups(count: int) -> None:
        process.stdin.write(f"{count}\n")
        process.stdin.flush()
        assert process.stdout.readline().strip() == "done"

    yield server, port, lookups
    process.stdin.close()
    process.wait(30)


def test_a_scrape_returns_the_documented_metrics_following_the_lookups(client_process):
    server, port, lookups = client_process
    lookups(5)
    samples = scrape(port)
    assert exposed_names(samples) == documented_names()
    assert len(documented_names()) == 13
    ranker = 'client="ranker"'
    assert samples[f"solaris_client_lookups_total{{{ranker}}}"] == 5
    assert samples[f'solaris_client_pairs_total{{{ranker},level="exact"}}'] == 10
    assert samples[f'solaris_client_pairs_total{{{ranker},level="miss"}}'] == 5
    assert samples[f"solaris_client_lookup_latency_seconds_count{{{ranker}}}"] == 5
    assert samples[f'solaris_client_lookup_latency_seconds_bucket{{{ranker},le="+Inf"}}'] == 5
    assert samples[f'solaris_client_version_info{{{ranker},model_version="m1",version="{V1}"}}'] == 1
    node = f'node="127.0.0.1:{server.port}"'
    assert samples[f"solaris_client_breaker_open{{{ranker},{node}}}"] == 0

    server.stop()  # the node stops answering: errors, then its breaker opens
    lookups(4)
    samples = scrape(port)
    assert samples[f'solaris_client_errors_total{{{ranker},kind="connection"}}'] >= 1
    assert samples[f"solaris_client_breaker_open{{{ranker},{node}}}"] == 1
    assert samples[f"solaris_client_breaker_opens_total{{{ranker}}}"] == 1
    assert samples[f"solaris_client_lookups_total{{{ranker}}}"] == 9
    assert samples[f'solaris_client_pairs_total{{{ranker},level="miss"}}'] == 5 + 12
