"""The exporters against real servers on 127.0.0.1: Debian's InfluxDB 1.x receives the
line protocol over UDP and HTTP and an InfluxQL query returns the points with their tags;
Debian's Prometheus scrapes the /metrics endpoint and its query API returns the series.
No Docker, no NVML: the snapshot is built in this process."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest

from drgpu.core import cost, metrics
from drgpu.core.cost import Usage
from drgpu.core.faults import with_faults
from drgpu.core.metrics import InfluxTarget
from drgpu.core.model import GpuHealth
from drgpu.errors import ConfigError
from drgpu.host.metrics_export import ExportError, InfluxSender, PrometheusEndpoint, datagrams
from tests.support.metrics_servers import Influx, free_port, influxdb, prometheus, wait_until
from tests.unit.core.test_metrics import G0, G1, a_status


def sender(target: InfluxTarget) -> InfluxSender:
    """A sender whose failures fail the test."""
    return InfluxSender(target, pytest.fail, lambda: None, pytest.fail)


def sent(sender: InfluxSender) -> None:
    sender.send(metrics.line_protocol(metrics.samples(a_status()), time.time_ns()))
    sender.close()


def check_points(influx: Influx) -> None:
    rows: list[dict[str, object]] = []

    def arrived() -> bool:
        rows[:] = influx.rows("SELECT * FROM drgpu_gpu GROUP BY *")
        return len(rows) == 2

    wait_until(arrived, "the points in InfluxDB")
    by_index = {row["gpu_index"]: row for row in rows}
    assert by_index["0"]["gpu_uuid"] == G0
    assert by_index["0"]["gpu_name"] == "Tesla T4"
    assert by_index["0"]["utilization_percent"] == 37
    assert by_index["0"]["temperature_celsius"] == 61
    assert by_index["0"]["power_watts"] == 70.5
    assert by_index["1"]["gpu_name"] == "NVIDIA GeForce RTX 3090, rev=2"  # escaped, back whole
    process = influx.rows("SELECT * FROM drgpu_process WHERE service = 'sagemaker' GROUP BY *")
    assert [(p["run"], p["role"], p["gpu_uuid"]) for p in process] == [("0", "trainer", G0)]
    assert process[0]["memory_used_bytes"] == 1000 * 1024 * 1024
    violations = influx.rows('SELECT "count", message FROM drgpu_violations GROUP BY *')
    assert [(v["kind"], v["service"], v["count"]) for v in violations] == [("stray", "miner", 1)]
    assert str(violations[0]["message"]).startswith("PID 4321 on GPU 1")


def test_points_reach_influxdb_over_udp(tmp_path: Path) -> None:
    with influxdb(tmp_path) as influx:
        sent(sender(InfluxTarget("udp", "127.0.0.1", influx.udp_port)))
        check_points(influx)


def test_points_reach_influxdb_over_http(tmp_path: Path) -> None:
    with influxdb(tmp_path) as influx:
        sent(sender(metrics.influx_target(influx.write_url)))
        check_points(influx)


def test_an_http_receiver_that_is_not_there_is_an_export_error() -> None:
    port = free_port()
    with pytest.raises(ExportError, match=f"cannot send to http://127.0.0.1:{port}/write"):
        sender(InfluxTarget("http", "127.0.0.1", port, "/write?db=x")).write(["m f=1"])


def test_an_unknown_udp_host_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        sender(InfluxTarget("udp", "no-such-host.invalid", 8092))


def test_datagrams_are_cut_at_line_ends() -> None:
    lines = [f"m,i={i} f={'x' * 90}" for i in range(40)]
    packets = list(datagrams(lines))
    assert len(packets) > 1
    assert all(len(p) <= 1400 and p.endswith(b"\n") for p in packets)
    assert b"".join(packets).decode().splitlines() == lines


def test_prometheus_scrapes_the_endpoint(tmp_path: Path) -> None:
    endpoint = PrometheusEndpoint("127.0.0.1", 0)
    try:
        endpoint.publish(metrics.samples(a_status()))
        text = urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics").read().decode()
        assert "# TYPE drgpu_gpu_utilization_percent gauge" in text
        assert "process_cpu_seconds_total" not in text  # a registry of its own
        with prometheus(tmp_path, f"127.0.0.1:{endpoint.port}") as server:
            found: list[dict[str, object]] = []

            def scraped() -> bool:
                found[:] = server.query("drgpu_gpu_power_watts")
                return bool(found)

            wait_until(scraped, "the scrape")
            series = found[0]
            assert series["metric"] == {
                "__name__": "drgpu_gpu_power_watts",
                "gpu_uuid": G0,
                "gpu_index": "0",
                "gpu_name": "Tesla T4",
                "instance": f"127.0.0.1:{endpoint.port}",
                "job": "drgpu",
            }
            assert series["value"][1] == "70.5"  # type: ignore[index]
            memory = server.query('drgpu_process_memory_used_bytes{service="sagemaker"}')
            assert memory[0]["metric"]["role"] == "trainer"
            assert memory[0]["metric"]["run"] == "0"
            assert memory[0]["value"][1] == str(1000 * 1024 * 1024)
            stray = server.query('drgpu_violations{kind="stray"}')
            assert stray[0]["metric"]["service"] == "miner"
            assert server.query(f'drgpu_gpu_memory_total_bytes{{gpu_uuid="{G1}"}}')
    finally:
        endpoint.close()


def test_a_port_in_use_is_a_config_error() -> None:
    first = PrometheusEndpoint("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError, match="cannot listen there"):
            PrometheusEndpoint("127.0.0.1", first.port)
    finally:
        first.close()


DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "drgpu-gpus.json"


def test_the_grafana_dashboards_queries_find_the_points(tmp_path: Path) -> None:
    """Every InfluxQL query of examples/grafana/drgpu-gpus.json, with Grafana's macros as
    Grafana fills them, returns series from what drgpu sent (the run variable's too)."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "influxdb"
    assert variables["datasource"]["current"]["value"] == "InfluxDB"  # DRfC's data source
    targets = [target for panel in dashboard["panels"] for target in panel.get("targets", ())]
    assert {target["datasource"]["uid"] for target in targets} == {"${datasource}"}
    queries = [target["query"] for target in targets]
    faulty = with_faults(a_status(), [GpuHealth(0, G0, remap_pending=True)])
    worker = {("0", "sagemaker", "deepracer-0-sagemaker-1"): Usage(60.0, 9.0, 900, 30.0, 2.0)}
    found = [*metrics.samples(faulty), *cost.samples(worker)]
    with influxdb(tmp_path) as influx:
        to_influx = sender(InfluxTarget("udp", "127.0.0.1", influx.udp_port))
        to_influx.send(metrics.line_protocol(found, time.time_ns()))
        to_influx.close()
        wait_until(lambda: bool(influx.query("SELECT * FROM drgpu_cost")), "the points")
        runs = influx.query(variables["run"]["query"])
        assert runs[0]["values"] == [["run", "0"]]
        for query in queries:
            filled = (
                query.replace("$timeFilter", "time > now() - 1h")
                .replace("$__interval", "10s")
                .replace("/^$run$/", "/^(0)$/")
            )
            assert not re.search(r"\$(?!/)", filled), filled  # every macro filled
            assert influx.query(filled), f"no series for: {filled}"
