"""Roles from the compose file, per-role and per-service devices: any stack, not only DeepRacer."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from drgpu.core.compose_stack import Stack
from drgpu.core.inputs import Inputs
from drgpu.core.model import Claim, Inventory, Role, ServicePlan
from drgpu.core.planning import make_plan
from drgpu.core.settings import Config, config_from_values, service_devices_key
from drgpu.errors import ConfigError, ExitCode, GpuValidationError
from drgpu.host.files import load_inventory, load_stack, override_header_template
from drgpu.targets.compose_override import render_override
from tests.plan_warnings import order_free

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "learner-carla"
GTX1650 = "GPU-1650beef-2c3d-4e5f-8a9b-0c1d2e3f4a5b"
RTX3090 = "GPU-3090c0de-5a1b-4c2d-9e3f-a4b5c6d7e8f9"
M40 = "GPU-40e7a5c1-9d2b-4f6a-8c3e-1b2d3f4a5c6e"
LEARNER_STACK = """
    services:
      learner:
        image: learner
        labels: {drgpu.role: trainer}
      carla:
        image: carla
        labels: ["drgpu.role=simulator"]
      evaluator:
        image: learner
      redis:
        image: redis
"""
DONE_WHEN = {
    "DRGPU_TRAINER_DEVICES": "2",
    "DRGPU_SIMULATOR_DEVICES": "0",
    "DRGPU_DEVICES_EVALUATOR": "1",
}


@pytest.fixture
def mixed_box() -> Inventory:
    """The bed's mixed box: 0 GTX 1650, 1 RTX 3090, 2 Tesla M40 (PCI bus order)."""
    return load_inventory(REPO / "examples" / "inventories" / "gtx1650-rtx3090-m40.json")


def config(**values: str) -> Config:
    return config_from_values(values, {})


def uuids(service: ServicePlan) -> list[str]:
    return [device.uuid for device in service.devices]


# --- roles from the compose file --------------------------------------------------------------


@pytest.mark.parametrize(
    "declaration",
    [
        "labels: {drgpu.role: trainer}",
        "labels: ['drgpu.role=trainer', 'other.label=x']",
        "labels: {drgpu.role: ' Trainer '}",
        "x-drgpu: {role: trainer}",
        "labels: {drgpu.role: trainer}\n    x-drgpu: {role: trainer}",
    ],
)
def test_a_service_declares_its_role_by_label_or_extension_field(
    write_stack: Callable[[str], Stack], declaration: str
) -> None:
    stack = write_stack(f"services:\n  learner:\n    {declaration}\n")
    assert stack.names(Role.TRAINER) == ["learner"]


@pytest.mark.parametrize(
    ("value", "role"),
    [
        ("simulator", Role.SIMULATOR),
        ("none", Role.OTHER),
        ("other", Role.OTHER),  # what drgpu writes on containers with no role
        ("trainer-launcher", Role.TRAINER_LAUNCHER),
    ],
)
def test_every_declared_value_maps_to_a_role(
    write_stack: Callable[[str], Stack], value: str, role: Role
) -> None:
    stack = write_stack(f"services:\n  s:\n    labels: {{drgpu.role: {value}}}\n")
    assert stack.services[0].role is role


def test_the_declared_role_wins_over_deepracers_names(write_stack: Callable[[str], Stack]) -> None:
    stack = write_stack(
        """
        services:
          sagemaker: {labels: {drgpu.role: none}}
          robomaker: {x-drgpu: {role: trainer}}
          rl_coach: {}
        """
    )
    roles = {service.name: service.role for service in stack.services}
    assert roles == {
        "sagemaker": Role.OTHER,
        "robomaker": Role.TRAINER,
        "rl_coach": Role.TRAINER_LAUNCHER,
    }


def test_a_later_file_redeclares_the_role_as_compose_merges_labels(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yml", tmp_path / "b.yml"
    first.write_text("services:\n  carla:\n    labels: {drgpu.role: trainer}\n")
    second.write_text("services:\n  carla:\n    labels: [drgpu.role=simulator]\n")
    assert load_stack([first, second]).names(Role.SIMULATOR) == ["carla"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("labels: {drgpu.role: trainr}", "drgpu.role label 'trainr' is not one of trainer,"),
        ("labels: [drgpu.role]", "drgpu.role label '' is not one of"),
        ("labels: {drgpu.role: null}", "drgpu.role label '' is not one of"),
        ("x-drgpu: {role: learner}", "x-drgpu.role 'learner' is not one of"),
        ("labels: {drgpu.role: '${ROLE}'}", "without variables"),
        ("x-drgpu: trainer", "x-drgpu must be a mapping"),
        ("x-drgpu: {rol: trainer}", "x-drgpu has no key 'rol'"),
        ("labels: {drgpu.role: mps-daemon}", "only drgpu's own drgpu-mps service"),
    ],
)
def test_a_bad_declaration_is_a_config_error_naming_file_and_service(
    write_stack: Callable[[str], Stack], body: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        write_stack(f"services:\n  learner:\n    {body}\n")
    assert caught.value.exit_code is ExitCode.CONFIG
    assert "docker-compose.yml: service learner: " in caught.value.message
    assert says in caught.value.message
    assert "\n" not in caught.value.message


def test_label_and_extension_field_that_disagree_are_two_roles(
    write_stack: Callable[[str], Stack],
) -> None:
    with pytest.raises(ConfigError) as caught:
        write_stack(
            "services:\n  carla:\n    labels: {drgpu.role: trainer}\n"
            "    x-drgpu: {role: simulator}\n"
        )
    message = caught.value.message
    assert message.startswith("service carla has two roles: drgpu.role label 'trainer' (")
    assert "and x-drgpu.role 'simulator' (" in message


def test_drgpus_own_mps_daemon_takes_no_other_role(write_stack: Callable[[str], Stack]) -> None:
    with pytest.raises(ConfigError, match="only drgpu's own drgpu-mps service is the MPS daemon"):
        write_stack("services:\n  drgpu-mps:\n    labels: {drgpu.role: trainer}\n")


def test_the_labels_drgpu_writes_on_containers_read_back_as_the_same_roles(
    write_stack: Callable[[str], Stack],
) -> None:
    stack = write_stack(
        """
        services:
          rl_coach: {labels: {drgpu.role: trainer-launcher}}
          redis: {labels: {drgpu.role: other}}
          drgpu-mps: {labels: {drgpu.role: mps-daemon}}
        """
    )
    assert [service.role for service in stack.services] == [
        Role.TRAINER_LAUNCHER,
        Role.OTHER,
        Role.MPS_DAEMON,
    ]


# --- the keys ---------------------------------------------------------------------------------


def test_the_aliases_name_the_role_devices() -> None:
    settings = config(DRGPU_TRAINER_DEVICES="auto", DRGPU_SIMULATOR_DEVICES="0,1")
    assert settings.trainer_devices.auto
    assert [s.text for s in settings.simulator_devices.selectors] == ["0", "1"]
    assert (settings.trainer_key, settings.simulator_key) == (
        "DRGPU_TRAINER_DEVICES",
        "DRGPU_SIMULATOR_DEVICES",
    )


def test_both_keys_of_one_role_may_agree() -> None:
    settings = config(DR_SAGEMAKER_CUDA_DEVICES=" 1", DRGPU_TRAINER_DEVICES="1")
    assert settings.trainer_key == "DRGPU_TRAINER_DEVICES"


def test_both_keys_of_one_role_that_disagree_are_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_values(
            {"DR_ROBOMAKER_CUDA_DEVICES": "0", "DRGPU_SIMULATOR_DEVICES": "1"},
            {},
        )
    assert caught.value.message == (
        "DRGPU_SIMULATOR_DEVICES: '1' differs from DR_ROBOMAKER_CUDA_DEVICES='0':"
        " they name the same role's GPUs; keep one of them"
    )


def test_per_service_keys_use_the_device_grammar() -> None:
    settings = config(DRGPU_DEVICES_EVALUATOR="auto", DRGPU_DEVICES_REPLAY_SERVER="1")
    assert [(own.key, own.request.auto) for own in settings.service_devices] == [
        ("DRGPU_DEVICES_EVALUATOR", True),
        ("DRGPU_DEVICES_REPLAY_SERVER", False),
    ]
    assert settings.wants_gpu
    with pytest.raises(ConfigError, match="DRGPU_DEVICES_EVALUATOR: 'cuda:x'"):
        config(DRGPU_DEVICES_EVALUATOR="cuda:x")


def test_a_misspelt_drgpu_key_is_still_unknown() -> None:
    with pytest.raises(ConfigError, match="DRGPU_DEVICE_EVALUATOR: unknown drgpu setting"):
        config(DRGPU_DEVICE_EVALUATOR="1")


@pytest.mark.parametrize(
    ("service", "key"),
    [
        ("evaluator", "DRGPU_DEVICES_EVALUATOR"),
        ("replay-server", "DRGPU_DEVICES_REPLAY_SERVER"),
        ("eval.v2", "DRGPU_DEVICES_EVAL_V2"),
    ],
)
def test_a_services_key_is_its_name_upper_cased(service: str, key: str) -> None:
    assert service_devices_key(service) == key


# --- planning: the done-when, and every service alike --------------------------------


def test_done_when_each_service_gets_exactly_its_gpu(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    plan = make_plan(config(**DONE_WHEN), write_stack(LEARNER_STACK), mixed_box)
    assert {service.name: uuids(service) for service in plan.services} == {
        "learner": [M40],
        "carla": [GTX1650],
        "evaluator": [RTX3090],
        "redis": [],
    }
    evaluator = plan.service("evaluator")
    assert evaluator.has_gpu
    assert evaluator.capabilities == ("gpu", "compute", "utility")
    assert dict(evaluator.environment) == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": RTX3090,
        "NVIDIA_VISIBLE_DEVICES": RTX3090,
    }
    assert dict(evaluator.labels)["drgpu.gpus"] == RTX3090
    assert dict(plan.service("redis").environment) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert not plan.service("redis").has_gpu
    assert order_free(plan.warnings) == ()


def test_the_example_renders_as_its_golden_file(mixed_box: Inventory, golden: ModuleType) -> None:
    from drgpu.host.files import read_settings

    settings = read_settings(Inputs(EXAMPLE / "system.env"))
    plan = make_plan(settings, load_stack([EXAMPLE / "docker-compose.yml"]), mixed_box)
    golden.assert_matches_golden(
        "learner-carla.yml", render_override(plan, override_header_template())
    )


def test_a_key_naming_two_services_is_a_config_error(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    """`eval-a` and `eval.a` share one key: drgpu cannot tell which one it means."""
    stack = write_stack(
        """
        services:
          eval-a: {image: learner}
          eval.a: {image: learner}
        """
    )
    with pytest.raises(ConfigError) as caught:
        make_plan(config(DRGPU_DEVICES_EVAL_A="1"), stack, mixed_box)
    assert caught.value.message == "DRGPU_DEVICES_EVAL_A names several services: eval-a, eval.a"


def test_a_key_naming_no_service_is_a_config_error(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    stack = write_stack(LEARNER_STACK)
    with pytest.raises(ConfigError) as caught:
        make_plan(config(DRGPU_DEVICES_EVALUATR="1"), stack, mixed_box)
    assert caught.value.exit_code is ExitCode.CONFIG
    assert caught.value.message == (
        "DRGPU_DEVICES_EVALUATR names no service of the stack;"
        " did you mean DRGPU_DEVICES_EVALUATOR?"
    )
    with pytest.raises(ConfigError) as caught:
        make_plan(config(DRGPU_DEVICES_MINIO="1"), stack, mixed_box)
    assert caught.value.message == (
        "DRGPU_DEVICES_MINIO names no service of the stack"
        " (its services: learner, carla, evaluator, redis)"
    )


def test_a_near_key_of_a_service_with_a_role_hints_its_role_key(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_plan(
            config(DRGPU_DEVICES_ROBOMAKR="1"),
            write_stack("services: {robomaker: {}, learner: {}}"),
            mixed_box,
        )
    assert caught.value.message == (
        "DRGPU_DEVICES_ROBOMAKR names no service of the stack;"
        " did you mean DR_ROBOMAKER_CUDA_DEVICES (robomaker is a simulator)?"
    )


def test_a_key_for_a_service_with_a_role_is_two_roles(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_plan(config(DRGPU_DEVICES_LEARNER="1"), write_stack(LEARNER_STACK), mixed_box)
    message = caught.value.message
    assert message.startswith(
        "DRGPU_DEVICES_LEARNER: service learner would have two roles: it is the trainer"
        " (drgpu.role label 'trainer' ("
    )
    assert message.endswith("whose GPUs come from DR_SAGEMAKER_CUDA_DEVICES")
    with pytest.raises(ConfigError, match="it is a simulator \\(by its name\\)"):
        make_plan(
            config(DRGPU_DEVICES_ROBOMAKER="1"),
            write_stack("services: {robomaker: {}}"),
            mixed_box,
        )


def test_role_none_with_its_own_key_gets_its_own_gpu(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    stack = write_stack("services:\n  robomaker:\n    labels: {drgpu.role: none}\n")
    plan = make_plan(config(DRGPU_DEVICES_ROBOMAKER="1"), stack, mixed_box)
    assert uuids(plan.service("robomaker")) == [RTX3090]
    assert plan.service("robomaker").role is Role.OTHER


def test_a_service_gpu_is_exclusive_like_the_trainers(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    settings = config(**{**DONE_WHEN, "DRGPU_DEVICES_EVALUATOR": "2"})
    with pytest.raises(GpuValidationError) as caught:
        make_plan(settings, write_stack(LEARNER_STACK), mixed_box)
    assert [f.message for f in caught.value.findings] == [
        "2: Tesla M40 24GB (22912 MiB, 00000000:81:00.0) is asked for by both the trainer"
        " (DRGPU_TRAINER_DEVICES) and service evaluator (DRGPU_DEVICES_EVALUATOR);"
        " DRGPU_SHARING=exclusive gives each GPU to one of them"
    ]


def test_timeslice_lets_a_service_share_and_tells_it_to_grow_memory(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    settings = config(**{**DONE_WHEN, "DRGPU_DEVICES_EVALUATOR": "2", "DRGPU_SHARING": "timeslice"})
    plan = make_plan(settings, write_stack(LEARNER_STACK), mixed_box)
    assert uuids(plan.service("evaluator")) == [M40]
    assert any("service evaluator" in warning.message for warning in plan.warnings)
    assert ("TF_FORCE_GPU_ALLOW_GROWTH", "true") in plan.service("evaluator").environment


def test_mps_makes_a_service_on_a_shared_gpu_a_client(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    settings = config(**{**DONE_WHEN, "DRGPU_DEVICES_EVALUATOR": "2", "DRGPU_SHARING": "mps"})
    plan = make_plan(settings, write_stack(LEARNER_STACK), mixed_box)
    assert plan.service("evaluator").ipc == "service:drgpu-mps"
    assert plan.service("learner").ipc == "service:drgpu-mps"
    assert uuids(plan.service("drgpu-mps")) == [M40]


def test_another_runs_claim_on_a_services_gpu_is_refused(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    claims = [Claim(run_id="other", service="evaluator", uuids=(RTX3090,))]
    with pytest.raises(GpuValidationError, match="planned for evaluator, is held by run 'other'"):
        make_plan(config(**DONE_WHEN), write_stack(LEARNER_STACK), mixed_box, claims)


def test_auto_gives_a_service_a_free_gpu_before_the_simulators_take_the_rest(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    settings = config(
        DRGPU_TRAINER_DEVICES="auto",
        DRGPU_SIMULATOR_DEVICES="auto",
        DRGPU_DEVICES_EVALUATOR="auto",
    )
    plan = make_plan(settings, write_stack(LEARNER_STACK), mixed_box)
    assert uuids(plan.service("learner")) == [RTX3090]  # the most memory
    assert uuids(plan.service("evaluator")) == [M40]  # the most memory left
    assert uuids(plan.service("carla")) == [GTX1650]
    assert any(line.startswith("evaluator (auto): GPU 2") for line in plan.explanations)


def test_auto_for_the_trainer_avoids_a_services_gpu(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    settings = config(DRGPU_TRAINER_DEVICES="auto", DRGPU_DEVICES_EVALUATOR="1")
    plan = make_plan(settings, write_stack(LEARNER_STACK), mixed_box)
    assert uuids(plan.service("learner")) == [M40]


def test_workers_are_copies_of_the_one_declared_simulator(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    settings = config(DRGPU_TRAINER_DEVICES="2", DRGPU_SIMULATOR_DEVICES="0,1", DR_WORKERS="2")
    plan = make_plan(settings, write_stack(LEARNER_STACK), mixed_box)
    names = [service.name for service in plan.services]
    assert names == ["learner", "carla", "carla-1", "carla-2", "evaluator", "redis"]
    assert plan.service("carla").disabled
    assert (
        plan.service("carla").note == "not started: carla-1 ... carla-2 run instead (DR_WORKERS=2)"
    )
    assert uuids(plan.service("carla-1")) == [GTX1650]
    assert uuids(plan.service("carla-2")) == [RTX3090]
    assert plan.service("carla-2").extends is not None
    assert ("DOCKER_REPLICA_SLOT", "2") in plan.service("carla-2").environment


def test_several_declared_simulators_are_no_workers(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    stack = write_stack(
        """
        services:
          carla: {labels: {drgpu.role: simulator}}
          isaac: {labels: {drgpu.role: simulator}}
        """
    )
    plan = make_plan(config(DRGPU_SIMULATOR_DEVICES="0", DR_WORKERS="2"), stack, mixed_box)
    assert [service.name for service in plan.services] == ["carla", "isaac"]
    assert "each runs once" in order_free(plan.warnings)[0]


def test_an_alias_set_for_a_stack_without_that_role_warns_in_drgpus_words(
    write_stack: Callable[[str], Stack], mixed_box: Inventory
) -> None:
    plan = make_plan(
        config(DRGPU_TRAINER_DEVICES="1"), write_stack("services: {redis: {}}"), mixed_box
    )
    assert order_free(plan.warnings) == (
        "DRGPU_TRAINER_DEVICES is set, but the stack has no trainer (sagemaker, rl_coach,"
        " or a service with drgpu.role: trainer)",
    )


def test_deepracer_names_keep_their_roles_without_any_declaration(
    write_stack: Callable[[str], Stack],
) -> None:
    stack = write_stack(
        textwrap.dedent(
            """
            services:
              sagemaker: {}
              robomaker: {}
              redis: {}
            """
        )
    )
    assert [service.role for service in stack.services] == [
        Role.TRAINER,
        Role.SIMULATOR,
        Role.OTHER,
    ]


def test_the_rendered_override_read_as_a_compose_file_declares_the_planned_roles(
    write_stack: Callable[[str], Stack], mixed_box: Inventory, tmp_path: Path
) -> None:
    stack = write_stack(
        """
        services:
          rl_coach: {}
          robomaker: {}
          evaluator: {}
          redis: {}
        """
    )
    settings = config(
        DR_SAGEMAKER_CUDA_DEVICES="2",
        DR_ROBOMAKER_CUDA_DEVICES="0",
        DRGPU_DEVICES_EVALUATOR="0",
        DRGPU_SHARING="mps",
        DR_WORKERS="2",
    )
    plan = make_plan(settings, stack, mixed_box)
    override = tmp_path / "override.yml"
    override.write_text(render_override(plan, override_header_template()).split("---\n")[-1])
    read_back = {service.name: service.role for service in load_stack([override]).services}
    assert read_back == {service.name: service.role for service in plan.services}
    assert Role.MPS_DAEMON in read_back.values()
