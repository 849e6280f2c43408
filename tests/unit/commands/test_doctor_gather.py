"""drgpu/commands/doctor.py's gathering of the settings doctor's checks need: the device
driver setting and whether the stack goes to Swarm."""

from __future__ import annotations

from pathlib import Path

from drgpu.commands.doctor import _gather_settings
from drgpu.commands.options import resolved
from drgpu.core.inputs import InputOptions
from drgpu.core.modes import DeviceDriver


def test_the_driver_setting_and_swarm_style_reach_the_checks(tmp_path: Path) -> None:
    env_file = tmp_path / "system.env"
    env_file.write_text("DR_DOCKER_STYLE=swarm\nDRGPU_DEVICE_DRIVER=cdi\n")
    facts = _gather_settings(resolved(InputOptions(env_file=env_file)))
    assert facts.config is not None and facts.error is None
    assert (facts.device_driver, facts.config.deploys_to_swarm()) == (DeviceDriver.CDI, True)
