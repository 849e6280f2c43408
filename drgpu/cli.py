"""The drgpu command line: a thin shell over the pure core.

`main` is the one place where an error becomes a message and an exit code.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from drgpu.errors import ConfigError, DrgpuError, ExitCode

if TYPE_CHECKING:
    import click

    from drgpu.commands.preparation import Prepared
    from drgpu.core.inputs import Inputs
    from drgpu.core.settings import Config


class _PlainHelpCommand(typer.core.TyperCommand):
    """Click's plain help, without the backslash typer puts before `[default: ...]` for rich
    (it does so even with rich_markup_mode=None)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _unescaped_help(super().format_help, ctx, formatter)


class _PlainHelpGroup(typer.core.TyperGroup):
    """`_PlainHelpCommand`'s help for `drgpu --help`."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _unescaped_help(super().format_help, ctx, formatter)


def _unescaped_help(
    format_help: Callable[[click.Context, click.HelpFormatter], None],
    ctx: click.Context,
    formatter: click.HelpFormatter,
) -> None:
    inner = ctx.make_formatter()
    format_help(ctx, inner)
    formatter.write(inner.getvalue().replace("\\[", "["))


def _examples(*lines: str) -> str:
    """The help's last paragraph: example command lines, kept as written."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="drgpu",
    help="Give each container of a DeepRacer-style training stack exactly its GPUs, and prove it.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=_PlainHelpGroup,
    epilog=_examples(
        "drgpu plan --env-file system.env.example"
        " --inventory examples/inventories/gtx1650-m40.json",
        "drgpu up && drgpu status --watch",
    ),
)


def _command(name: str | None = None, *, examples: tuple[str, ...]) -> Callable[[F], F]:
    """A subcommand of `app` with plain help that ends with `examples`."""
    return app.command(name=name, cls=_PlainHelpCommand, epilog=_examples(*examples))


def _print_version(value: bool) -> None:
    if value:
        from drgpu import __version__

        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """The options before a command: --version, and typer's shell completion."""


EnvFile = Annotated[
    Path | None,
    typer.Option(
        "--env-file",
        help="The settings file (DeepRacer-for-cloud's system.env; default: $DR_DIR/system.env"
        " in an activated DRfC shell, else ./system.env).",
    ),
]
RunEnv = Annotated[
    Path | None,
    typer.Option(
        "--run-env",
        help="Settings layered on top (default: $DR_CONFIG in an activated DRfC shell, else"
        " run.env beside --env-file).",
    ),
]
InventoryFile = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        help="Plan against a topology JSON file (`drgpu gpus --json`) instead of this host's NVML.",
    ),
]
ComposeFiles = Annotated[
    list[Path] | None,
    typer.Option(
        "--file",
        "-f",
        "-c",
        "--compose-file",
        help="A compose file of your stack (repeatable; -c as in `docker stack deploy`);"
        " default: DR_TRAIN_COMPOSE_FILE in an activated DRfC shell, else drgpu's own.",
    ),
]
Evaluation = Annotated[
    bool,
    typer.Option(
        "--eval",
        help="DeepRacer-for-cloud's evaluation: DR_EVAL_COMPOSE_FILE, project"
        " deepracer-eval-<DR_RUN_ID>.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]
Swarm = Annotated[
    bool, typer.Option("--swarm", help="Docker Swarm, as DR_DOCKER_STYLE=swarm asks for.")
]


def _target(
    env_file: Path | None,
    run_env: Path | None,
    files: list[Path] | None,
    evaluation: bool,
    *,
    needs_files: bool = True,
) -> Inputs:
    """What the command acts on: flags first, then an activated DRfC shell, then defaults."""
    from drgpu.core.inputs import resolve_inputs

    return resolve_inputs(
        env_file=env_file,
        run_env=run_env,
        compose_files=files,
        evaluation=evaluation,
        environ=os.environ,
        needs_files=needs_files,
    )


def _settings(target: Inputs) -> Config:
    """The target's settings (secret values hidden); what reading them noticed goes to
    stderr at once."""
    from drgpu.commands.preparation import load_settings
    from drgpu.ui.talk import warn

    config = load_settings(target)
    for message in config.warnings:
        warn(message)
    return config


def _prepared(target: Inputs, inventory: Path | None) -> Prepared:
    from drgpu.commands import preparation

    return preparation.prepare_with(_settings(target), target, inventory)


@_command(
    examples=(
        "drgpu plan",
        "drgpu plan --inventory examples/inventories/gtx1650-m40.json --json",
    )
)
def plan(
    env_file: EnvFile = None,
    run_env: RunEnv = None,
    inventory: InventoryFile = None,
    file: ComposeFiles = None,
    evaluation: Evaluation = False,
    json_output: Json = False,
    swarm: Swarm = False,
) -> None:
    """Show which GPUs each service would get, after checking them against the machine.

    With --swarm (or DR_DOCKER_STYLE=swarm): which GPUs are pinned, which the engine chooses.
    """
    from drgpu.ui import tables

    prepared = _prepared(_target(env_file, run_env, file, evaluation), inventory)
    if swarm or prepared.config.docker_style == "swarm":
        from drgpu.commands import swarm_deploy

        view = swarm_deploy.plan_view(prepared, this_host=inventory is None)
        if json_output:
            tables.print_json(tables.swarm_plan_document(prepared.plan, view))
        else:
            tables.swarm_plan_table(prepared.plan, view)
        tables.warnings([*prepared.plan.warnings, *view.warnings])
        return
    from drgpu.core.redaction import masked_plan

    shown = masked_plan(prepared.plan)
    if json_output:
        tables.print_json(tables.plan_document(shown))
    else:
        tables.plan_table(shown)
    tables.warnings(prepared.plan.warnings)


@_command(examples=("drgpu render -o my-override.yml", "drgpu render --k8s --inventory box.json"))
def render(
    env_file: EnvFile = None,
    run_env: RunEnv = None,
    inventory: InventoryFile = None,
    file: ComposeFiles = None,
    evaluation: Evaluation = False,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to FILE (atomically).")
    ] = None,
    swarm: Swarm = False,
    k8s: Annotated[
        bool, typer.Option("--k8s", help="Kubernetes manifests (nvidia.com/gpu) instead.")
    ] = False,
    dra: Annotated[
        bool,
        typer.Option("--dra", help="With --k8s: ResourceClaims naming each GPU by UUID (DRA)."),
    ] = False,
) -> None:
    """Print the Compose override that gives each service exactly its GPUs.

    With --swarm (or DR_DOCKER_STYLE=swarm) the Swarm stack file; with --k8s Kubernetes
    manifests. Secret values are masked on stdout; a file written with -o keeps them (mode 600).
    """
    from drgpu.commands.rendering import rendered
    from drgpu.commands.state_files import write_owned_file
    from drgpu.ui import tables

    prepared = _prepared(_target(env_file, run_env, file, evaluation), inventory)
    result = rendered(prepared, swarm=swarm, k8s=k8s, dra=dra, this_host=inventory is None)
    if output is None:
        sys.stdout.write(result.shown)
    else:
        write_owned_file(output, result.text, private=result.shown != result.text)
    tables.warnings([*prepared.plan.warnings, *result.warnings])


ScriptArgs = Annotated[
    list[str] | None,
    typer.Argument(
        help="In an activated DeepRacer-for-cloud shell: arguments for its start script,"
        " after `--` (e.g. `drgpu up -- -w`).",
        show_default=False,
    ),
]


@_command(examples=("drgpu up", "drgpu up -- -w   (in an activated DeepRacer-for-cloud shell)"))
def up(
    env_file: EnvFile = None,
    run_env: RunEnv = None,
    file: ComposeFiles = None,
    swarm: Swarm = False,
    evaluation: Evaluation = False,
    script_args: ScriptArgs = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress lines on stderr, only the result.")
    ] = False,
) -> None:
    """Check, render, start the stack, and prove every container got exactly its GPUs.

    On stderr, one line per service: its state as Compose reports it, then drgpu's check.
    In an activated DeepRacer-for-cloud shell, DRfC's own start script starts it (with
    drgpu's override added to the compose files it reads); see docs/drfc.md.
    """
    target = _target(env_file, run_env, file, evaluation)
    config = _settings(target)
    if swarm or config.docker_style == "swarm":
        from drgpu.commands.drfc_stack import warn_swarm_skips_scripts

        warn_swarm_skips_scripts(target, explicit_files=bool(file))
        _swarm_up(config, target)
        return
    from drgpu.commands import compose_run, drfc_stack, preparation
    from drgpu.ui import tables
    from drgpu.ui.progress import UpProgress

    scripts = drfc_stack.runs_scripts(target, explicit_files=bool(file))
    if scripts:
        target = drfc_stack.script_target(target, config)
    elif script_args:
        raise ConfigError(
            f"unexpected argument {script_args[0]!r}",
            hint="arguments after `--` are for DRfC's start script, in an activated DRfC shell",
        )
    with preparation.prepare_locked(config, target) as prepared:
        tables.warnings(prepared.plan.warnings)
        with UpProgress(quiet=quiet) as progress:
            if scripts:
                plan, containers = drfc_stack.up(prepared, script_args or [], progress)
            else:
                plan, containers = prepared.plan, compose_run.up(prepared, progress)
    tables.up_table(plan, containers)


@_command(examples=("drgpu down", "drgpu down -f docker/docker-compose-training.yml"))
def down(
    env_file: EnvFile = None,
    run_env: RunEnv = None,
    file: ComposeFiles = None,
    swarm: Swarm = False,
    evaluation: Evaluation = False,
) -> None:
    """Stop and remove the stack's containers (with --remove-orphans), or its Swarm stack.

    In an activated DeepRacer-for-cloud shell, DRfC's own stop script stops it.
    """
    from drgpu.commands import compose_run, drfc_stack, run_lock

    target = _target(env_file, run_env, file, evaluation)
    config = _settings(target)
    if swarm or config.docker_style == "swarm":
        from drgpu.commands import swarm_deploy
        from drgpu.commands.state_files import override_path

        stack = swarm_deploy.stack_path(
            override_path(target.env_file, config.project), config.project
        )
        with run_lock.down_locked(config, target):
            swarm_deploy.down(config, stack)
        return
    if drfc_stack.runs_scripts(target, explicit_files=bool(file)):
        drfc_stack.down(config, drfc_stack.script_target(target, config))
        return
    compose_run.down(config, target)


@_command(
    "drfc-env",
    examples=(
        'eval "$(drgpu drfc-env)" && dr-start-training',
        'eval "$(drgpu drfc-env --eval)" && dr-start-evaluation',
    ),
)
def drfc_env(evaluation: Evaluation = False) -> None:
    """Print exports that let DeepRacer-for-cloud's own dr-start-training and
    dr-stop-training (or -evaluation) use drgpu's GPUs: eval "$(drgpu drfc-env)".

    Plans now (checked like `drgpu plan`), writes the override `drgpu up` would use, and
    prints `export DR_TRAIN_COMPOSE_FILE='... -f <override>'` and COMPOSE_REMOVE_ORPHANS=1.
    Run it again after changing system.env or run.env; `drgpu up` also proves the result.
    """
    from drgpu.commands import drfc_stack, preparation
    from drgpu.ui import tables

    target = _target(None, None, None, evaluation)
    if target.checkout is None:
        raise ConfigError(
            "not an activated DeepRacer-for-cloud shell (DR_DIR is not set)",
            hint="source bin/activate.sh in your DRfC checkout first",
        )
    config = _settings(target)
    if config.docker_style == "swarm":
        raise ConfigError(
            "drgpu drfc-env is for DR_DOCKER_STYLE=compose: in swarm style DRfC's scripts run"
            " `docker stack deploy`, which cannot take drgpu's Compose override",
            hint="set DR_DOCKER_STYLE=compose in system.env and activate again; or `drgpu up`,"
            " which deploys drgpu's own stack file without DRfC's start script (docs/drfc.md)",
        )
    target = drfc_stack.script_target(target, config)
    prepared = preparation.prepare_with(config, target, None)
    tables.warnings(prepared.plan.warnings)
    sys.stdout.write(drfc_stack.shell_exports(prepared))


@_command(examples=("drgpu gpus --full", "drgpu gpus --json > box.json"))
def gpus(
    full: Annotated[bool, typer.Option("--full", help="Show whole UUIDs.")] = False,
    json_output: Json = False,
) -> None:
    """List this host's GPUs in nvidia-smi (PCI bus) order, with CUDA's order beside, and which
    drgpu run holds each."""
    from drgpu.commands import gpus as gpus_command
    from drgpu.ui import tables

    inventory, holders = gpus_command.read()
    if json_output:
        tables.print_json(gpus_command.document(inventory, holders))
    else:
        tables.gpus_table(inventory, full=full, holders=holders)


@_command(examples=("drgpu status --watch", "drgpu status --watch --json --interval 5 --run-id 0"))
def status(
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Only this run (default: every drgpu run).")
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="A live view redrawn in place until Ctrl-C (plain lines when stdout is no"
            " terminal; with --json one document per line).",
        ),
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between refreshes.")
    ] = 1.0,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="With --watch: stop after N refreshes.")
    ] = None,
    evaluation: Annotated[
        bool,
        typer.Option(
            "--eval",
            help="Only the evaluation of the run (--run-id, or DR_RUN_ID of the settings).",
        ),
    ] = False,
    json_output: Json = False,
) -> None:
    """Each run's containers, their GPUs, and every GPU process mapped to its container.

    Exits 6 when a process runs on a GPU its service was not given, or belongs to no stack.
    """
    from drgpu.commands import status as status_command
    from drgpu.core import gpu_usage
    from drgpu.errors import CheckFailedError
    from drgpu.host.nvml import nvml_session
    from drgpu.ui import tables

    if evaluation:
        run_id = f"eval-{run_id or _run_id_of(_target(None, None, None, True, needs_files=False))}"
    last: gpu_usage.Status | None
    with nvml_session() as session:
        if not watch:
            last = status_command.snapshot(session, run_id)
            if json_output:
                tables.print_json(gpu_usage.document(last))
            else:
                tables.status_table(last)
        else:
            from drgpu.ui.live import watch_display

            with watch_display(json_lines=json_output, interval_s=interval) as show:
                last = status_command.watch(session, run_id, show, interval, count)
    if last is not None and not last.ok:
        first = last.violations[0].message
        more = f" (and {len(last.violations) - 1} more)" if len(last.violations) > 1 else ""
        raise CheckFailedError(f"{first}{more}")


@_command(
    examples=(
        "drgpu doctor",
        "drgpu doctor --probe --image awsdeepracercommunity/deepracer-robomaker:5.2.1-gpu",
    )
)
def doctor(
    env_file: EnvFile = None,
    file: ComposeFiles = None,
    image: Annotated[
        list[str] | None,
        typer.Option(
            "--image",
            help="Also check this local image (repeatable); the first is the one --probe starts"
            " (default: the simulator image of the stack, as Compose resolves it).",
        ),
    ] = None,
    probe: Annotated[
        bool,
        typer.Option("--probe", help="Start a short container with a GPU device request."),
    ] = False,
    json_output: Json = False,
) -> None:
    """Check the host: driver, NVML, Docker, the NVIDIA container toolkit, Compose, images.

    Exits 6 when a check fails (warnings pass).
    """
    from drgpu.commands import doctor as doctor_command
    from drgpu.core import host_checks
    from drgpu.errors import CheckFailedError
    from drgpu.ui import tables
    from drgpu.ui.talk import spinner

    with spinner("checking the host"):
        facts = doctor_command.gather(
            _target(env_file, None, file, False, needs_files=False), image or [], probe
        )
    checks = host_checks.run_checks(facts)
    if json_output:
        tables.print_json(host_checks.document(checks))
    else:
        tables.doctor_table(checks)
    failed = [check for check in checks if check.status == host_checks.FAIL]
    if failed:
        raise CheckFailedError(
            f"{len(failed)} check(s) failed: {', '.join(check.id for check in failed)}",
            hint=failed[0].fix,
        )


@_command(
    "cuda-check",
    examples=(
        "drgpu cuda-check --all",
        "drgpu cuda-check --expect 1 --frameworks torch   (inside a container)",
    ),
)
def cuda_check(
    service: Annotated[
        str | None, typer.Option("--service", help="Check this service's container (host side).")
    ] = None,
    all_services: Annotated[
        bool, typer.Option("--all", help="Check every GPU service of the stack (host side).")
    ] = False,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="The run (default: DR_RUN_ID of --env-file).")
    ] = None,
    env_file: EnvFile = None,
    evaluation: Annotated[
        bool, typer.Option("--eval", help="Host side: the run's evaluation (deepracer-eval-N).")
    ] = False,
    expect: Annotated[
        int | None, typer.Option("--expect", help="Inside: the number of GPUs to see.")
    ] = None,
    expect_uuid: Annotated[
        list[str] | None, typer.Option("--expect-uuid", help="Inside: a UUID to see (repeat).")
    ] = None,
    frameworks: Annotated[
        str | None, typer.Option("--frameworks", help="Inside: also ask torch,tensorflow.")
    ] = None,
    json_output: Json = False,
) -> None:
    """What a container really sees: run inside one, or from the host with --service/--all."""
    if service is None and not all_services:
        from drgpu import probe

        argv = ["--json"] if json_output else []
        argv += ["--expect", str(expect)] if expect is not None else []
        for uuid in expect_uuid or []:
            argv += ["--expect-uuid", uuid]
        argv += ["--frameworks", frameworks] if frameworks else []
        raise typer.Exit(probe.main(argv))
    from drgpu.commands import cuda_check
    from drgpu.core import cuda_verdict
    from drgpu.errors import CheckFailedError, DockerError
    from drgpu.host.engine import project_containers
    from drgpu.ui import tables

    target = _target(env_file, None, None, evaluation, needs_files=False)
    prefix = "deepracer-eval" if evaluation else "deepracer"
    project = f"{prefix}-{run_id or _run_id_of(target)}"
    containers = project_containers(project)
    if not containers:
        raise DockerError(f"no containers of {project}: is the stack up?")
    results = cuda_check.check(cuda_verdict.select(containers, service))
    if all_services:
        trainers = cuda_check.sagemaker_trainers(containers)
        results += cuda_check.check_trainers(trainers)
    if json_output:
        tables.print_json(cuda_verdict.document(project, results))
    else:
        tables.check_table(project, results)
    if not all(result.ok for result in results):
        raise CheckFailedError("a container does not see what it was given (see above)")


def _run_id_of(target: Inputs) -> str:
    """DR_RUN_ID of the target's settings, when there are any; else 0."""
    if not target.env_file.is_file():
        return "0"
    return _settings(target).run_id


def _swarm_up(config: Config, target: Inputs) -> None:
    """`up` on Docker Swarm: deploy the stack, wait for its tasks, verify them (under the
    engine-wide lock, as every `up` and `down`)."""
    from drgpu.commands import preparation, run_lock, swarm_deploy
    from drgpu.commands.state_files import state_dir
    from drgpu.ui import tables

    state_dir(target.env_file)
    with run_lock.locked("up", config.project, config.values):
        prepared = preparation.prepare_with(config, target, None)
        tables.warnings(prepared.plan.warnings)
        stack, tasks = swarm_deploy.up(prepared)
    tables.warnings(stack.warnings)
    tables.swarm_up_table(stack, tasks)


@_command(
    "swarm-setup", examples=("drgpu swarm-setup", "drgpu swarm-setup --inventory box.json --json")
)
def swarm_setup(
    inventory: InventoryFile = None,
    daemon_json: Annotated[
        Path, typer.Option("--daemon-json", help="The engine's settings file to check.")
    ] = Path("/etc/docker/daemon.json"),
    toolkit_config: Annotated[
        Path, typer.Option("--toolkit-config", help="The NVIDIA runtime's config.toml to check.")
    ] = Path("/etc/nvidia-container-runtime/config.toml"),
    json_output: Json = False,
    env_file: EnvFile = None,
) -> None:
    """Print what this node needs for Swarm to hand out its GPUs, and check what differs.

    The trainer's GPUs (DR_SAGEMAKER_CUDA_DEVICES of the settings, when there are any) are
    not advertised: the engine may give any advertised GPU to a simulator.
    Exits 6 when daemon.json, the NVIDIA runtime's config or the running engine differ.
    """
    from drgpu.commands import swarm_setup
    from drgpu.core import swarm_node
    from drgpu.errors import CheckFailedError
    from drgpu.ui import tables

    if inventory is not None:
        from drgpu.core.topology import load_inventory

        gpus = load_inventory(inventory)
    else:
        from drgpu.host.nvml import read_inventory

        gpus = read_inventory()
    target = _target(env_file, None, None, False, needs_files=False)
    config = _settings(target) if target.env_file.is_file() else None
    kept = swarm_setup.trainer_gpus(config, gpus)
    state = swarm_setup.read_node(daemon_json, toolkit_config)
    wanted = swarm_node.wanted_resources(gpus, kept)
    setup = swarm_node.report(wanted, state, daemon_json, toolkit_config, kept=kept)
    if json_output:
        tables.print_json(swarm_node.document(setup))
    else:
        sys.stdout.write(swarm_node.text(setup))
    differing = [f for f in setup.findings if f.status == swarm_node.DIFFERS]
    if differing:
        raise CheckFailedError(
            f"this node is not set up for Swarm GPUs: {len(differing)} difference(s)"
            f", first: {differing[0].subject}: {differing[0].detail}"
        )


@_command("version", examples=("drgpu version", "drgpu --version"))
def version() -> None:
    """Print drgpu's version."""
    from drgpu import __version__

    typer.echo(__version__)


def _fail(message: str, hint: str | None, code: int) -> NoReturn:
    sys.stderr.write(f"drgpu: error: {_one_line(message)}\n")
    if hint:
        sys.stderr.write(f"  hint: {hint}\n")
    raise SystemExit(code)


def _one_line(text: str) -> str:
    """`text` on one line, its control characters (a NUL, an escape) written visibly."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; the one place where errors turn into messages and exit codes (see
    ExitCode), where the signals drgpu catches start unwinding, and where output is
    kept free of secrets."""
    from drgpu.host import signals
    from drgpu.ui.redacting import redacting_output

    with redacting_output(), signals.caught():
        _main(argv)


def _main(argv: list[str] | None) -> None:
    from drgpu.host import signals, trace

    command = typer.main.get_command(app)
    click_error: type[Exception] = next(
        c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
    )
    try:
        trace.configure(os.environ)  # DRGPU_LOG
        code = command.main(args=argv, prog_name="drgpu", standalone_mode=False)
    except DrgpuError as exc:
        _fail(exc.message, exc.hint, exc.exit_code)
    except click_error as exc:
        message = str(getattr(exc, "format_message", exc.__str__)())
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(message)
            raise SystemExit(ExitCode.OK) from None
        _fail(message.strip().splitlines()[0], "see drgpu --help", ExitCode.CONFIG)
    except typer.Abort:
        _fail("aborted", None, ExitCode.INTERRUPTED)
    except signals.Interrupted as exc:  # Ctrl-C, or another signal drgpu catches
        _fail(f"interrupted ({exc.name})", None, exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", None, ExitCode.INTERRUPTED)
    except BrokenPipeError:  # stdout's reader left (`drgpu plan | head -1`): nothing to say
        with contextlib.suppress(OSError, ValueError):  # what is left must not be flushed
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(ExitCode.OK) from None
    except RecursionError:
        _fail("input nested too deeply to read", None, ExitCode.CONFIG)
    except Exception as exc:
        if os.environ.get("DRGPU_DEBUG"):
            raise
        _fail(
            f"unexpected {type(exc).__name__}: {exc}",
            "this is a bug in drgpu; DRGPU_DEBUG=1 shows the traceback",
            ExitCode.UNEXPECTED,
        )
    if code not in (None, *ExitCode):
        raise SystemExit(ExitCode.UNEXPECTED)
    raise SystemExit(code if isinstance(code, int) else 0)
