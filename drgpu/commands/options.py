"""What the command line names, shared by the commands: what a command acts on
(`core.inputs`), and its settings read."""

from __future__ import annotations

import os

from drgpu.core.inputs import InputOptions, Inputs, resolve_inputs
from drgpu.core.settings import Config
from drgpu.host import docker_api
from drgpu.host.files import exists, read_settings
from drgpu.ui.redacting import hide
from drgpu.ui.talk import warn


def resolved(options: InputOptions) -> Inputs:
    """What the command acts on: flags first, then an activated DRfC shell, then defaults."""
    return resolve_inputs(options, os.environ)


def settings(target: Inputs, *, quiet: bool = False) -> Config:
    """The target's settings, whose secret values no output shows from now on; warnings go to
    stderr at once (`quiet`: not at all)."""
    config = read_settings(target)
    docker_api.use_settings(config.values)
    hide(config.secrets)
    for message in () if quiet else config.warnings:
        warn(message)
    return config


def run_id_of(target: Inputs) -> str:
    """DR_RUN_ID of the target's settings, when there are any; else 0."""
    return settings(target).run_id if exists(target.env_file, file=True) else "0"
