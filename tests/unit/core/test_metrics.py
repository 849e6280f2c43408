"""The series `status --watch` exports, from a snapshot: names, tags, values, line protocol
and its escaping, and the addresses `--influx` and `--prometheus` take."""

from __future__ import annotations

import pytest

from drgpu.core import gpu_usage, metrics
from drgpu.core.facts import ContainerFacts
from drgpu.core.model import Gpu, GpuProcess, Inventory
from drgpu.errors import ConfigError

G0 = "GPU-00000000-0000-4000-8000-000000000000"
G1 = "GPU-11111111-0000-4000-8000-000000000000"
TRAINER_ID = "a" * 64
OTHER_ID = "b" * 64


def a_status() -> gpu_usage.Status:
    """A trainer of run 0 on GPU 0 (two processes), a stray container on GPU 1, a lost GPU."""
    trainer = ContainerFacts(
        id=TRAINER_ID,
        name="deepracer-0-sagemaker-1",
        service="sagemaker",
        project="deepracer-0",
        state="running",
        labels={"drgpu.run_id": "0", "drgpu.gpus": G0, "drgpu.role": "trainer"},
    )
    other = ContainerFacts(id=OTHER_ID, name="miner", service="", project="", state="running")
    gpus = (
        Gpu(
            index=0,
            uuid=G0,
            name="Tesla T4",
            pci_bus_id="00000000:01:00.0",
            memory_total_mib=15360,
            memory_used_mib=1000,
            utilization_gpu_percent=37,
            temperature_c=61,
            power_w=70.5,
            processes=(GpuProcess(1234, 900), GpuProcess(1235, 100)),
        ),
        Gpu(
            index=1,
            uuid=G1,
            name="NVIDIA GeForce RTX 3090, rev=2",
            pci_bus_id="00000000:02:00.0",
            memory_total_mib=24576,
            processes=(GpuProcess(4321, 2048),),
        ),
        Gpu(index=2, uuid="", name="", pci_bus_id="", memory_total_mib=0, error="gpu_is_lost"),
    )
    cgroups: dict[int, str | None] = {
        1234: f"0::/docker/{TRAINER_ID}\n",
        1235: f"0::/docker/{TRAINER_ID}\n",
        4321: f"0::/docker/{OTHER_ID}\n",
    }
    return gpu_usage.build_status(Inventory(gpus=gpus), [trainer], [other], cgroups)


Labels = tuple[tuple[str, str], ...]


def by_name(found: tuple[metrics.Sample, ...], name: str) -> dict[Labels, float]:
    return {s.labels: s.value for s in found if s.metric.name == name}


def test_each_gpu_has_its_series_with_the_three_gpu_tags() -> None:
    found = metrics.samples(a_status())
    tags = (("gpu_uuid", G0), ("gpu_index", "0"), ("gpu_name", "Tesla T4"))
    assert by_name(found, "drgpu_gpu_utilization_percent")[tags] == 37
    assert by_name(found, "drgpu_gpu_memory_used_bytes")[tags] == 1000 * 1024 * 1024
    assert by_name(found, "drgpu_gpu_memory_total_bytes")[tags] == 15360 * 1024 * 1024
    assert by_name(found, "drgpu_gpu_temperature_celsius") == {tags: 61}  # GPU 1 has none
    assert by_name(found, "drgpu_gpu_power_watts") == {tags: 70.5}
    # The lost GPU has no series; GPU 1's utilisation is unknown, so it has none either.
    assert len(by_name(found, "drgpu_gpu_memory_total_bytes")) == 2
    assert len(by_name(found, "drgpu_gpu_utilization_percent")) == 1


def test_process_memory_is_summed_per_run_service_role_and_gpu() -> None:
    found = by_name(metrics.samples(a_status()), "drgpu_process_memory_used_bytes")
    trainer = (("run", "0"), ("service", "sagemaker"), ("role", "trainer"), ("gpu_uuid", G0))
    stray = (("run", ""), ("service", "miner"), ("role", ""), ("gpu_uuid", G1))
    assert found == {trainer: 1000 * 1024 * 1024, stray: 2048 * 1024 * 1024}


def test_a_sagemaker_trainers_service_is_its_rl_coach_and_container_name() -> None:
    """docs/metrics.md: `rl_coach/<its container>`, as the engine names the container."""
    coach = ContainerFacts(OTHER_ID, "deepracer-0-rl_coach-1", "rl_coach", "deepracer-0",
                           "running", labels={"drgpu.run_id": "0", "drgpu.role": "trainer-launcher",
                                              "drgpu.forwarded_gpus": G0})  # fmt: skip
    algo = "tmphfwaa1dw-algo-1-lt2tk-1"
    trainer = ContainerFacts(TRAINER_ID, algo, "algo-1-lt2tk", "tmphfwaa1dw", "running")
    gpu = Gpu(0, G0, "Tesla T4", "00000000:01:00.0", 15360, processes=(GpuProcess(7, 700),))
    cgroups: dict[int, str | None] = {7: f"0::/docker/{TRAINER_ID}\n"}
    status = gpu_usage.build_status(Inventory(gpus=(gpu,)), [coach], [trainer], cgroups)
    found = by_name(metrics.samples(status), "drgpu_process_memory_used_bytes")
    tags = (("run", "0"), ("service", f"rl_coach/{algo}"), ("role", "trainer"), ("gpu_uuid", G0))
    assert found == {tags: 700 * 1024 * 1024}


def test_violations_are_counted_per_kind_run_and_service() -> None:
    found = [s for s in metrics.samples(a_status()) if s.metric is metrics.VIOLATIONS]
    assert [(s.labels, s.value) for s in found] == [
        ((("kind", "stray"), ("run", ""), ("service", "miner")), 1.0)
    ]
    assert found[0].message.startswith("PID 4321 on GPU 1")


def test_line_protocol_groups_fields_and_escapes_tags() -> None:
    lines = metrics.line_protocol(metrics.samples(a_status()), 1_700_000_000_000_000_000)
    gpu1 = next(line for line in lines if "gpu_index=1" in line)
    assert gpu1 == (
        f"drgpu_gpu,gpu_uuid={G1},gpu_index=1,gpu_name=NVIDIA\\ GeForce\\ RTX\\ 3090\\,\\ rev\\=2"
        " memory_used_bytes=0i,memory_total_bytes=25769803776i 1700000000000000000"
    )
    gpu0 = next(line for line in lines if "gpu_index=0" in line)
    assert " utilization_percent=37.0,memory_used_bytes=1048576000i," in gpu0
    assert "temperature_celsius=61.0,power_watts=70.5 " in gpu0
    process = next(line for line in lines if line.startswith("drgpu_process,run=0"))
    assert process.startswith(
        f"drgpu_process,run=0,service=sagemaker,role=trainer,gpu_uuid={G0} memory_used_bytes="
    )
    # An empty tag value is left out (line protocol has none).
    stray = next(line for line in lines if line.startswith("drgpu_violations"))
    assert stray.startswith('drgpu_violations,kind=stray,service=miner count=1i,message="PID 4321')


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("a b", "a\\ b"),
        ("a,b=c", "a\\,b\\=c"),
        ("two\nlines", "two\u29f5nlines"),  # a line break written visibly
        ("ends\\", "ends\u29f5"),  # a backslash would escape what follows it
        ("\\", "\u29f5"),  # never empty
        ("\x1b]0;x\x07", "\u29f5x1b]0;x\u29f5x07"),
        ("plain", "plain"),
    ],
)
def test_tag_escaping(text: str, escaped: str) -> None:
    assert metrics.escape_tag(text) == escaped


def test_string_fields_are_quoted() -> None:
    assert metrics.quote_field('say "hi" \\ there') == '"say \\"hi\\" \\\\ there"'


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("udp://127.0.0.1:8092", metrics.InfluxTarget("udp", "127.0.0.1", 8092)),
        ("udp://[::1]:8092", metrics.InfluxTarget("udp", "::1", 8092)),
        (
            "http://localhost:8086/write?db=influx",
            metrics.InfluxTarget("http", "localhost", 8086, "/write?db=influx"),
        ),
        (
            "https://db.example:8086/write?db=x&precision=s",
            metrics.InfluxTarget("https", "db.example", 8086, "/write?db=x&precision=s"),
        ),
    ],
)
def test_influx_urls(url: str, target: metrics.InfluxTarget) -> None:
    assert metrics.influx_target(url) == target


@pytest.mark.parametrize(
    "url",
    [
        "udp://127.0.0.1",  # no port
        "tcp://127.0.0.1:8092",
        "127.0.0.1:8092",
        "udp://127.0.0.1:99999",
        "udp://127.0.0.1:8092/x",
        "http://127.0.0.1:8086/write",  # no db
        "http://127.0.0.1:8086/query?db=x",
        "http://user:secret@127.0.0.1:8086/write?db=x",
        "",
    ],
)
def test_bad_influx_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        metrics.influx_target(url)
    assert "secret" not in raised.value.message


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("9400", ("127.0.0.1", 9400)),
        (":9400", ("127.0.0.1", 9400)),
        ("0.0.0.0:9400", ("0.0.0.0", 9400)),
        ("[::]:9400", ("::", 9400)),
        ("192.168.1.5:80", ("192.168.1.5", 80)),
    ],
)
def test_prometheus_addresses(text: str, address: tuple[str, int]) -> None:
    assert metrics.prometheus_address(text) == address


@pytest.mark.parametrize("text", ["", "x", ":0", "1:2:99999", "a b:9400", "9400x"])
def test_bad_prometheus_addresses(text: str) -> None:
    with pytest.raises(ConfigError):
        metrics.prometheus_address(text)
