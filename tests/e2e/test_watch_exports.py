"""`drgpu status --watch` on the bed as its users run it, for hours: every refresh reaches a
real InfluxDB 1.x (UDP listener) and a real Prometheus (scraping `--prometheus`), each new
violation runs `--on-violation`'s command once, and the watch outlives the engine going
away and coming back, NVML failing (the fake driver re-reads its file: FAKE_NVML_RELOAD)
and containers vanishing between two refreshes."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import SIMULATOR, SPARE, THREE_GPUS, TRAINER
from tests.support.metrics_servers import free_port, influxdb, prometheus, wait_until
from tests.support.runners import start_drgpu

pytestmark = pytest.mark.docker


def start_service(bed: Any, run_id: str, service: str, role: str, gpu: str) -> int:
    """A sleeping container labelled as drgpu's `service` of `run_id` given `gpu`; its PID."""
    labels = {
        "drgpu.run_id": run_id,
        "drgpu.gpus": gpu,
        "drgpu.role": role,
        "com.docker.compose.project": f"deepracer-{run_id}",
        "com.docker.compose.service": service,
    }
    flags = [arg for key, value in labels.items() for arg in ("--label", f"{key}={value}")]
    started = bed.docker("run", "-d", "--network", "none", *flags, bed.image, "sleep", "infinity")
    inspected = json.loads(bed.docker("inspect", started.stdout.strip()).stdout)
    return int(inspected[0]["State"]["Pid"])


def topology(placed: dict[str, list[int]], **gpu_fields: Any) -> dict[str, Any]:
    """THREE_GPUS with these PIDs on each GPU (by UUID), and `gpu_fields` on every GPU."""
    found = copy.deepcopy(THREE_GPUS)
    for gpu in found["gpus"]:
        gpu["processes"] = [
            {"pid": pid, "used_memory_mib": 300} for pid in placed.get(gpu["uuid"], [])
        ]
        gpu.update(gpu_fields)
    return found


HOOK = """import json, os, sys, time
folder = sys.argv[1]
document = json.load(sys.stdin)
variables = {k: v for k, v in os.environ.items() if k.startswith("DRGPU_VIOLATION_")}
name = os.path.join(folder, f"{time.time_ns()}.json")
with open(name, "w") as out:
    json.dump({"stdin": document, "env": variables}, out)
"""


def test_a_watch_feeds_influxdb_prometheus_and_the_violation_command(
    bed: Any, new_run: Any, tmp_path: Path
) -> None:
    run_id = new_run()
    trainer = start_service(bed, run_id, "sagemaker", "trainer", TRAINER)
    simulator = start_service(bed, run_id, "robomaker", "simulator", SIMULATOR)
    # The simulator also runs on the spare GPU: a wrong-gpu violation all along.
    placed = {TRAINER: [trainer], SIMULATOR: [simulator], SPARE: [simulator]}
    bed.set_topology(topology(placed, utilization_gpu_percent=40, temperature_c=66, power_w=150))
    alerts = tmp_path / "alerts"
    alerts.mkdir()
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK)
    (tmp_path / "influx").mkdir()
    (tmp_path / "prometheus").mkdir()
    port = free_port()
    with (
        influxdb(tmp_path / "influx") as influx,
        prometheus(tmp_path / "prometheus", f"127.0.0.1:{port}") as server,
    ):
        watch = start_drgpu(
            "status", "--watch", "--interval", "0.25", "--count", "30", "--run-id", run_id,
            "--influx", f"udp://127.0.0.1:{influx.udp_port}", "--prometheus", str(port),
            "--on-violation", f"{sys.executable} {hook} {alerts}",
            env=bed.env(),
        )  # fmt: skip
        try:
            query = f'drgpu_process_memory_used_bytes{{run="{run_id}",service="robomaker"}}'
            wait_until(lambda: len(server.query(query)) == 2, "Prometheus to scrape drgpu")
            temperature = server.query(f'drgpu_gpu_temperature_celsius{{gpu_uuid="{TRAINER}"}}')
            out, err = watch.communicate(timeout=60)
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.communicate()
        assert watch.returncode == 6, err  # the violation, to the last refresh
        assert f"drgpu: Prometheus metrics on http://127.0.0.1:{port}/metrics" in err
        assert "Traceback" not in err and "warning" not in err, err
        assert "temp 66C power 150W" in out  # plain lines: stdout is a pipe
        assert temperature[0]["metric"]["gpu_name"] == "Tesla M40 24GB"
        assert temperature[0]["value"][1] == "66"

        processes = influx.rows(f"SELECT * FROM drgpu_process WHERE run = '{run_id}' GROUP BY *")
        seen = {(p["service"], p["role"], p["gpu_uuid"]) for p in processes}
        assert seen == {
            ("sagemaker", "trainer", TRAINER),
            ("robomaker", "simulator", SIMULATOR),
            ("robomaker", "simulator", SPARE),
        }
        assert len(processes) >= 3 * 20  # a point per refresh and series (UDP may lose some)
        gpus = influx.rows(f"SELECT * FROM drgpu_gpu WHERE gpu_uuid = '{TRAINER}' GROUP BY *")
        assert {(g["gpu_index"], g["gpu_name"]) for g in gpus} == {("1", "Tesla M40 24GB")}
        assert {(g["utilization_percent"], g["power_watts"]) for g in gpus} == {(40, 150)}
        violations = influx.rows("SELECT * FROM drgpu_violations GROUP BY *")
        assert {(v["kind"], v["run"], v["service"], v["count"]) for v in violations} == {
            ("wrong-gpu", run_id, "robomaker", 1)
        }

    # One violation, new once: the command ran once, told everything.
    ran = [json.loads(path.read_text()) for path in sorted(alerts.iterdir())]
    assert len(ran) == 1, ran
    told, variables = ran[0]["stdin"], ran[0]["env"]
    assert told["kind"] == "wrong-gpu"
    assert (told["run"], told["service"], told["pid"]) == (run_id, "robomaker", simulator)
    assert variables["DRGPU_VIOLATION_KIND"] == "wrong-gpu"
    assert variables["DRGPU_VIOLATION_SERVICE"] == "robomaker"
    assert variables["DRGPU_VIOLATION_PID"] == str(simulator)
    assert variables["DRGPU_VIOLATION_MESSAGE"] == told["message"]


def test_a_failing_violation_command_is_a_warning(bed: Any, new_run: Any) -> None:
    run_id = new_run()
    simulator = start_service(bed, run_id, "robomaker", "simulator", SIMULATOR)
    bed.set_topology(topology({SPARE: [simulator]}))
    watch = start_drgpu(
        "status", "--watch", "--interval", "0.3", "--count", "8", "--run-id", run_id,
        "--on-violation", "sh -c 'echo it broke >&2; exit 3'", env=bed.env(),
    )  # fmt: skip
    _, err = watch.communicate(timeout=120)
    assert watch.returncode == 6
    assert "drgpu: warning: --on-violation: sh exited 3: it broke" in err


class SocketProxy:
    """A unix socket that forwards to the bed's engine, and can go away (every connection
    cut, the socket file removed) and come back, as a restarting dockerd does."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target
        self._server: socket.socket | None = None
        self._open: list[socket.socket] = []

    def start(self) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for connection in self._open:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        self._open.clear()
        self.path.unlink(missing_ok=True)

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxy(bed: Any) -> Iterator[SocketProxy]:
    folder = Path(tempfile.mkdtemp(prefix="drgpu-proxy-", dir="/tmp"))  # short: a socket path
    found = SocketProxy(folder / "docker.sock", bed.docker_host.removeprefix("unix://"))
    found.start()
    yield found
    found.stop()
    shutil.rmtree(folder, ignore_errors=True)


def test_the_watch_outlives_the_engine_nvml_and_vanishing_containers(
    bed: Any, new_run: Any, proxy: SocketProxy
) -> None:
    run_id = new_run()
    trainer = start_service(bed, run_id, "sagemaker", "trainer", TRAINER)
    bed.set_topology(topology({TRAINER: [trainer]}, utilization_gpu_percent=10))
    env = bed.env(DOCKER_HOST=f"unix://{proxy.path}", FAKE_NVML_RELOAD="1")
    watch = start_drgpu("status", "--watch", "--json", "--interval", "0.2", env=env)
    documents: list[dict[str, Any]] = []
    said: list[str] = []

    def read() -> None:
        assert watch.stdout is not None
        documents.extend(json.loads(line) for line in watch.stdout)

    def listen() -> None:
        assert watch.stderr is not None
        said.extend(watch.stderr)

    readers = [threading.Thread(target=job, daemon=True) for job in (read, listen)]
    for reader in readers:
        reader.start()

    def refreshed(check: Any = lambda d: True, what: str = "a refresh") -> None:
        seen = len(documents)
        wait_until(lambda: any(check(d) for d in documents[seen:]), what)

    def utilization(document: dict[str, Any]) -> int:
        return int(document["gpus"][1]["utilization_gpu_percent"])

    try:
        refreshed()
        # The engine goes away, and comes back.
        proxy.stop()
        wait_until(lambda: any("Docker engine" in line for line in said), "the engine missed")
        gone = len(documents)
        time.sleep(1)  # five refreshes' time, none of which may land
        assert len(documents) == gone  # refreshes without the engine are skipped
        proxy.start()
        refreshed(lambda d: d["runs"] and d["ok"], "the engine to answer again")
        # NVML fails (the driver went away), and comes back with other numbers.
        bed.set_topology({**THREE_GPUS, "init_error": "driver_not_loaded"})
        wait_until(lambda: any("NVML failed" in line for line in said), "NVML to fail")
        bed.set_topology(topology({TRAINER: [trainer]}, utilization_gpu_percent=77))
        refreshed(lambda d: utilization(d) == 77, "NVML to come back")
        # Containers of the run come and go between refreshes.
        for number in range(6):
            service = f"worker-{number}"
            pid = start_service(bed, run_id, service, "simulator", SIMULATOR)
            bed.set_topology(topology({TRAINER: [trainer], SIMULATOR: [pid]}))
            time.sleep(0.07 * number)  # gone before, during or after a refresh
            label = f"label=com.docker.compose.service={service}"
            found = bed.docker("ps", "-q", "--filter", label)
            bed.docker("rm", "-f", *found.stdout.split())
        refreshed()
        assert watch.poll() is None, said
    finally:
        watch.send_signal(signal.SIGINT)
        watch.wait(timeout=30)
        for reader in readers:
            reader.join(timeout=10)
    err = "".join(said)
    assert watch.returncode == 0, err
    lines = err.splitlines()
    engine = [line for line in lines if "Docker engine" in line]
    assert len(engine) == 2, err  # said once when it went, once when it came back
    assert engine[0].startswith("drgpu: warning: cannot reach the Docker engine at ")
    assert engine[0].endswith("; the Docker engine: retrying at every refresh")
    assert engine[1] == "drgpu: the Docker engine is back"
    nvml = [line for line in lines if "NVML" in line]
    assert nvml == [
        "drgpu: warning: NVML failed: Driver Not Loaded; NVML: retrying at every refresh",
        "drgpu: NVML is back",
    ], err
    assert "Traceback" not in err
