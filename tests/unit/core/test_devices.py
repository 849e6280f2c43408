"""The device grammar of DR_*_CUDA_DEVICES: parsing (no machine) and resolving (an inventory)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drgpu.core.devices import (
    MAX_INDEX,
    NO_GPU,
    DeviceRequest,
    DeviceSyntaxError,
    SelectorKind,
    parse_devices,
    resolve,
)
from drgpu.core.model import Gpu, Inventory, MigDevice

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0, bus 03
GTX1650 = "GPU-3b1d9c52-7a4e-4f0b-8c6d-2e9f1a7b5c30"  # gtx_m40 index 1, bus 81
A100 = "GPU-a1000000-0000-4000-8000-000000000001"  # mig_l4 index 0, in MIG mode
A100_MIG_1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
A100_MIG_2 = "MIG-a1000000-0000-4000-8000-0000000000a2"


def kinds(value: str) -> list[SelectorKind]:
    return [selector.kind for selector in parse_devices(value).selectors]


def syntax_error(value: str) -> str:
    with pytest.raises(DeviceSyntaxError) as caught:
        parse_devices(value)
    message = str(caught.value)
    assert "\n" not in message
    return message


def resolved_uuids(value: str, inventory: Inventory) -> list[str]:
    assignments, problems = resolve(parse_devices(value), inventory)
    assert problems == []
    return [assignment.uuid for assignment in assignments]


def problems_of(value: str, inventory: Inventory) -> list[str]:
    return resolve(parse_devices(value), inventory)[1]


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "   ", "none", "NONE", " None "])
def test_empty_and_none_ask_for_no_gpu(value: str) -> None:
    request = parse_devices(value)
    assert request == NO_GPU
    assert not request.wants_gpu


@pytest.mark.parametrize("value", ["all", "ALL", " all "])
def test_all_asks_for_every_gpu(value: str) -> None:
    assert parse_devices(value) == DeviceRequest(all=True)


def test_indices_parse_in_the_order_written() -> None:
    request = parse_devices("1, 0")
    assert [s.text for s in request.selectors] == ["1", "0"]
    assert kinds("1, 0") == [SelectorKind.INDEX, SelectorKind.INDEX]


@pytest.mark.parametrize("value", [M40, M40.lower(), M40.upper(), "GPU-6f0c", "gpu-6F0C2a"])
def test_full_and_abbreviated_gpu_uuids_parse(value: str) -> None:
    assert kinds(value) == [SelectorKind.GPU_UUID]


@pytest.mark.parametrize("value", ["00000000:81:00.0", "0000:81:00.0", "81:00.0"])
def test_pci_bus_ids_parse_in_all_three_spellings(value: str) -> None:
    request = parse_devices(value)
    assert kinds(value) == [SelectorKind.PCI_BUS_ID]
    assert request.selectors[0].key == "pci:00000000:81:00.0"


@pytest.mark.parametrize(
    "value", [A100_MIG_1, "MIG-a1000000", "MIG-GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5/1/0"]
)
def test_mig_uuids_parse_in_new_and_old_driver_forms(value: str) -> None:
    assert kinds(value) == [SelectorKind.MIG_UUID]


def test_forms_mix_in_one_list() -> None:
    assert kinds(f"0,{GTX1650},03:00.0,{A100_MIG_1}") == [
        SelectorKind.INDEX,
        SelectorKind.GPU_UUID,
        SelectorKind.PCI_BUS_ID,
        SelectorKind.MIG_UUID,
    ]


def test_torch_device_strings_are_kept_to_be_answered_with_the_machine() -> None:
    # Which GPU `cuda:1` is depends on the machine: planning says what to write.
    assert kinds("cuda:1, CUDA:0") == [SelectorKind.CUDA_ORDINAL, SelectorKind.CUDA_ORDINAL]
    assert syntax_error("cuda:x") == (
        "'cuda:x' is not a device (torch's 'cuda:N' device strings do not belong here):"
        " write an nvidia-smi index (0, 1, ...) or a GPU UUID"
    )


def test_empty_entry_between_commas_is_refused_with_the_list_to_write() -> None:
    assert syntax_error("1,,2") == "'1,,2' has an empty entry between commas: write '1,2'"


def test_trailing_comma_is_an_empty_entry() -> None:
    assert syntax_error("0,") == "'0,' has an empty entry between commas: write '0'"


def test_same_index_twice_is_refused() -> None:
    assert syntax_error("0,0") == "'0,0' names the same device twice ('0' and '0')"


def test_same_bus_id_in_two_spellings_is_refused() -> None:
    assert syntax_error("81:00.0,0000:81:00.0") == (
        "'81:00.0,0000:81:00.0' names the same device twice ('81:00.0' and '0000:81:00.0')"
    )


def test_same_uuid_in_two_cases_is_refused() -> None:
    assert "names the same device twice" in syntax_error(f"{M40},{M40.upper()}")


def test_negative_index_is_refused() -> None:
    assert syntax_error("0,-1") == "'-1': GPU indices start at 0 and cannot be negative"


@pytest.mark.parametrize("value", ["auto", "AUTO", " Auto "])
def test_auto_leaves_the_choice_to_drgpu(value: str, gtx_m40: Inventory) -> None:
    request = parse_devices(value)
    assert request == DeviceRequest(auto=True)
    assert request.wants_gpu
    assert resolve(request, gtx_m40) == ([], [])


def test_auto_cannot_be_combined_with_other_devices() -> None:
    assert syntax_error("auto,1") == "'auto' cannot be combined with other devices"


def test_all_cannot_be_combined_with_other_devices() -> None:
    assert syntax_error("0,all") == "'all' cannot be combined with other devices"


@pytest.mark.parametrize("value", ["gpu0", "1.5", "0x1", "GPU-", "GPU-xyz", "81:00", "a,b"])
def test_unknown_forms_are_refused_with_the_forms_that_work(value: str) -> None:
    message = syntax_error(value)
    assert "is not a device: use an nvidia-smi index (0, 1, ...), a GPU UUID" in message


@given(st.lists(st.integers(min_value=0, max_value=MAX_INDEX), unique=True, min_size=1))
def test_any_list_of_distinct_indices_round_trips(indices: list[int]) -> None:
    request = parse_devices(",".join(map(str, indices)))
    assert [int(selector.text) for selector in request.selectors] == indices
    assert all(selector.kind is SelectorKind.INDEX for selector in request.selectors)


@given(st.text())
def test_parse_raises_only_one_line_device_syntax_errors(text: str) -> None:
    try:
        parse_devices(text)
    except DeviceSyntaxError as exc:
        assert "\n" not in str(exc)


@given(st.text(alphabet="0123456789abcdefABCDEF:.,-GPUMIcua /", max_size=40))
def test_parse_raises_only_device_syntax_errors_on_near_misses(text: str) -> None:
    with contextlib.suppress(DeviceSyntaxError):
        parse_devices(text)


# --- resolving ---------------------------------------------------------------------------------


def test_indices_are_nvidia_smi_order_not_listing_order(gtx_m40: Inventory) -> None:
    assert resolved_uuids("0", gtx_m40) == [M40]
    assert resolved_uuids("1", gtx_m40) == [GTX1650]


def test_full_uuid_resolves(gtx_m40: Inventory) -> None:
    assert resolved_uuids(GTX1650, gtx_m40) == [GTX1650]


def test_unique_uuid_prefix_resolves_to_the_full_uuid(gtx_m40: Inventory) -> None:
    assert resolved_uuids("GPU-3b1d", gtx_m40) == [GTX1650]


def test_uuid_prefix_is_case_insensitive(gtx_m40: Inventory) -> None:
    assert resolved_uuids("gpu-6F0C2A4E", gtx_m40) == [M40]


@pytest.mark.parametrize("value", ["00000000:81:00.0", "0000:81:00.0", "81:00.0", "81:0.0"])
def test_pci_bus_id_resolves_in_every_spelling(value: str, gtx_m40: Inventory) -> None:
    assert resolved_uuids(value, gtx_m40) == [GTX1650]


def test_all_resolves_to_every_gpu_in_index_order(gtx_m40: Inventory) -> None:
    assert resolved_uuids("all", gtx_m40) == [M40, GTX1650]


def test_all_gives_mig_slices_of_a_gpu_in_mig_mode(mig_l4: Inventory) -> None:
    assert resolved_uuids("all", mig_l4)[:2] == [A100_MIG_1, A100_MIG_2]


def test_no_gpu_resolves_to_nothing(gtx_m40: Inventory) -> None:
    assert resolve(NO_GPU, gtx_m40) == ([], [])


def test_mig_uuid_resolves_to_the_slice_of_its_gpu(mig_l4: Inventory) -> None:
    assignments, problems = resolve(parse_devices(A100_MIG_2), mig_l4)
    assert problems == []
    assert [(a.gpu.uuid, a.uuid, a.memory_total_mib) for a in assignments] == [
        (A100, A100_MIG_2, 9856)
    ]


def test_ambiguous_uuid_prefix_names_every_match(mig_l4: Inventory) -> None:
    assert problems_of("MIG-a1000000", mig_l4) == [
        f"'MIG-a1000000' is ambiguous: it matches {A100_MIG_1}, {A100_MIG_2}"
    ]


def test_ambiguous_gpu_uuid_prefix_names_every_match() -> None:
    twins = Inventory(
        gpus=(
            Gpu(0, "GPU-abc1", "NVIDIA T4", "00000000:01:00.0", 15360),
            Gpu(1, "GPU-abc2", "NVIDIA T4", "00000000:02:00.0", 15360),
        )
    )
    assert problems_of("GPU-abc", twins) == [
        "'GPU-abc' is ambiguous: it matches GPU-abc1, GPU-abc2"
    ]


def test_unknown_index_lists_what_exists(gtx_m40: Inventory) -> None:
    assert problems_of("2", gtx_m40) == [
        "no GPU matches '2'; this machine has"
        " 0: Tesla M40 24GB (22912 MiB, 00000000:03:00.0),"
        " 1: NVIDIA GeForce GTX 1650 (4096 MiB, 00000000:81:00.0)"
    ]


def test_an_unknown_uuid_lists_another_nodes_gpus_by_uuid_and_node(gtx_m40: Inventory) -> None:
    """A swarm plan's inventory holds the GPUs other nodes advertise (as planning adds them:
    index -1, named after their node, nothing else known)."""
    there = Gpu(-1, "GPU-00000002-0000-4000-8000-000000000001", "on node vm (5oeuy38bigky)", "", 0)
    swarm = Inventory(gpus=(*gtx_m40.gpus, there))
    [problem] = problems_of("GPU-9999", swarm)
    assert problem.endswith(
        "1: NVIDIA GeForce GTX 1650 (4096 MiB, 00000000:81:00.0),"
        " GPU-00000002-0000-4000-8000-000000000001 on node vm (5oeuy38bigky)"
    )


def test_an_index_with_thousands_of_leading_zeros_resolves(gtx_m40: Inventory) -> None:
    assert resolved_uuids("0" * 5000 + "1", gtx_m40) == resolved_uuids("1", gtx_m40)


def test_unknown_index_on_a_machine_without_gpus_says_so() -> None:
    assert problems_of("0", Inventory(gpus=())) == ["no GPU matches '0'; this machine has no GPU"]


def test_unknown_uuid_and_bus_id_are_reported(gtx_m40: Inventory) -> None:
    problems = problems_of("GPU-ffff,41:00.0", gtx_m40)
    assert [problem.split(";")[0] for problem in problems] == [
        "no GPU matches 'GPU-ffff'",
        "no GPU matches '41:00.0'",
    ]


def test_same_gpu_named_two_ways_is_caught_when_resolving(gtx_m40: Inventory) -> None:
    assert problems_of(f"0,{M40}", gtx_m40) == [f"{M40!r} names a device already in the list"]


def test_same_gpu_by_index_and_bus_id_is_caught_when_resolving(gtx_m40: Inventory) -> None:
    assert problems_of("1,81:00.0", gtx_m40) == ["'81:00.0' names a device already in the list"]


def test_gpu_in_mig_mode_asked_whole_points_at_its_mig_devices(mig_l4: Inventory) -> None:
    assert problems_of("0", mig_l4) == [
        "GPU 0 (NVIDIA A100-SXM4-40GB) is in MIG mode and cannot be given whole:"
        f" ask for one of its MIG devices ({A100_MIG_1}, {A100_MIG_2})"
    ]


def test_gpu_in_mig_mode_asked_by_uuid_is_refused_too(mig_l4: Inventory) -> None:
    assert "is in MIG mode" in problems_of(A100, mig_l4)[0]


def test_lost_gpu_is_refused_and_left_out_of_all() -> None:
    inventory = Inventory(
        gpus=(
            Gpu(0, "GPU-aaaa", "NVIDIA T4", "00000000:01:00.0", 15360),
            Gpu(1, "GPU-bbbb", "NVIDIA T4", "00000000:02:00.0", 15360, error="GPU is lost"),
        )
    )
    assert problems_of("1", inventory) == ["GPU 1 (00000000:02:00.0) is lost: NVML cannot reach it"]
    assert resolved_uuids("all", inventory) == ["GPU-aaaa"]


def test_every_problem_of_a_list_is_reported(gtx_m40: Inventory) -> None:
    assert len(problems_of("5,GPU-ffff,0", gtx_m40)) == 2


def test_mig_device_of_a_gpu_not_in_mig_mode_is_not_found() -> None:
    inventory = Inventory(
        gpus=(
            Gpu(
                0,
                "GPU-aaaa",
                "NVIDIA A30",
                "00000000:01:00.0",
                24576,
                mig_mode=False,
                mig_devices=(MigDevice("MIG-aaaa", 6144),),
            ),
        )
    )
    assert problems_of("MIG-aaaa", inventory)[0].startswith("no MIG device matches 'MIG-aaaa'")


@given(st.sets(st.sampled_from([0, 1])))
def test_any_set_of_indices_resolves_to_those_gpus(indices: set[int]) -> None:
    inventory = Inventory(
        gpus=(
            Gpu(0, "GPU-0000", "NVIDIA T4", "00000000:01:00.0", 15360),
            Gpu(1, "GPU-1111", "NVIDIA T4", "00000000:02:00.0", 15360),
        )
    )
    request = parse_devices(",".join(str(index) for index in sorted(indices)))
    assignments, problems = resolve(request, inventory)
    assert problems == []
    assert [a.gpu.index for a in assignments] == sorted(indices)


def test_old_driver_mig_uuid_resolves() -> None:
    old_style = "MIG-GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5/1/0"
    inventory = Inventory(
        gpus=(
            Gpu(
                0,
                "GPU-b8ea3855-276c-c9cb-b366-c6fa655957c5",
                "NVIDIA A100-PCIE-40GB",
                "00000000:01:00.0",
                40960,
                mig_mode=True,
                mig_devices=(MigDevice(old_style, 4864),),
            ),
        )
    )
    assert resolved_uuids(old_style, inventory) == [old_style]
