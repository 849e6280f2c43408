"""drgpu/commands/doctor.py's gathering of the settings doctor's checks need: the device
driver setting and whether the stack goes to Swarm."""

from __future__ import annotations

from pathlib import Path

import pytest

from drgpu.commands import doctor
from drgpu.commands.options import resolved
from drgpu.core.inputs import InputOptions
from drgpu.core.modes import DeviceDriver


def test_the_driver_setting_and_swarm_style_reach_the_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_DOCKER_STYLE=swarm\nDRGPU_DEVICE_DRIVER=cdi\n")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setattr(doctor, "_stack_images", lambda config, target: ((), None))
    monkeypatch.setattr(doctor, "_compose_version", lambda values: "2.32.1\n")
    facts = doctor.gather(resolved(InputOptions(env_file=env_file)), [], False)
    assert facts.config is not None and "settings" not in facts.errors
    assert (facts.config.device_driver, facts.config.deploys_to_swarm()) == (DeviceDriver.CDI, True)
    assert facts.daemon is None and "no-engine.sock" in facts.errors["docker"][0]
