"""The drgpu command line: a thin shell over the pure core.

`main` is the one place where an error becomes a message and an exit code.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import click
import typer
from typer.models import CommandFunctionType as F

from drgpu import __version__
from drgpu.errors import ConfigError, DrgpuError, ExitCode
from drgpu.host import signals, trace
from drgpu.ui.redacting import redacting_output
from drgpu.ui.talk import one_line

if TYPE_CHECKING:
    from drgpu.core.inputs import InputOptions


class _PlainHelp(click.Command):
    """Click's plain help, without the backslash typer puts before `[default: ...]` for rich
    (it does so even with rich_markup_mode=None)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        inner = ctx.make_formatter()
        super().format_help(ctx, inner)
        formatter.write(inner.getvalue().replace("\\[", "["))


class _PlainHelpCommand(_PlainHelp, typer.core.TyperCommand):
    """A command's plain help."""


class _PlainHelpGroup(_PlainHelp, typer.core.TyperGroup):
    """`drgpu --help`, plain."""


def _examples(*lines: str) -> str:
    """The help's last paragraph: example command lines, kept as written."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


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


def _command(*examples: str) -> Callable[[F], F]:
    """A subcommand of `app` (named by typer after its function, `_` as `-`) with plain help
    that ends with `examples`."""
    return app.command(cls=_PlainHelpCommand, epilog=_examples(*examples))


def _print_version(value: bool) -> None:
    if value:
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


def _inputs(
    env_file: Path | None = None,
    run_env: Path | None = None,
    files: list[Path] | None = None,
    *,
    evaluation: bool = False,
    needs_files: bool = True,
) -> InputOptions:
    """The settings and compose files named on the command line (see `resolved`)."""
    from drgpu.core.inputs import InputOptions  # lazy: start-up time

    return InputOptions(env_file, run_env, tuple(files) if files else None, evaluation, needs_files)


def _show(show: Callable[..., None], result: Any, *, json_output: bool) -> None:
    """A command's result shown, then its failure raised, if any (exit 6: see ExitCode)."""
    show(result, json_output=json_output)
    if result.failure is not None:
        raise result.failure


@_command("drgpu plan", "drgpu plan --inventory examples/inventories/gtx1650-m40.json --json")
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
    from drgpu.commands import plan as plan_command  # lazy: start-up time
    from drgpu.ui.tables import failure_shown, show_plan  # lazy: start-up time

    inputs = _inputs(env_file, run_env, file, evaluation=evaluation)
    with failure_shown(json_output=json_output):
        show_plan(plan_command.plan(inputs, inventory, swarm=swarm), json_output=json_output)


@_command("drgpu render -o my-override.yml", "drgpu render --k8s --inventory box.json")
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
    from drgpu.commands import rendering  # lazy: start-up time
    from drgpu.ui.tables import show_rendered  # lazy: start-up time

    options = rendering.RenderOptions(
        inputs=_inputs(env_file, run_env, file, evaluation=evaluation),
        inventory=inventory,
        output=output,
        swarm=swarm,
        k8s=k8s,
        dra=dra,
    )
    show_rendered(rendering.render(options), to_stdout=output is None)


ScriptArgs = Annotated[
    list[str] | None,
    typer.Argument(
        help="In an activated DeepRacer-for-cloud shell: arguments for its start script,"
        " after `--` (e.g. `drgpu up -- -w`).",
        show_default=False,
    ),
]


@_command("drgpu up", "drgpu up -- -w   (in an activated DeepRacer-for-cloud shell)")
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
    from drgpu.commands import up as up_command  # lazy: start-up time
    from drgpu.ui.tables import show_up  # lazy: start-up time

    inputs = _inputs(env_file, run_env, file, evaluation=evaluation)
    show_up(up_command.up(inputs, swarm=swarm, script_args=tuple(script_args or ()), quiet=quiet))


@_command("drgpu down", "drgpu down -f docker/docker-compose-training.yml")
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
    from drgpu.commands import down as down_command  # lazy: start-up time

    down_command.down(_inputs(env_file, run_env, file, evaluation=evaluation), swarm=swarm)


@_command(
    'eval "$(drgpu drfc-env)" && dr-start-training',
    'eval "$(drgpu drfc-env --eval)" && dr-start-evaluation',
)
def drfc_env(evaluation: Evaluation = False) -> None:
    """Print exports that let DeepRacer-for-cloud's own dr-start-training and
    dr-stop-training (or -evaluation) use drgpu's GPUs: eval "$(drgpu drfc-env)".

    Plans now (checked like `drgpu plan`), writes the override `drgpu up` would use, and
    prints `export DR_TRAIN_COMPOSE_FILE='... -f <override>'` and COMPOSE_REMOVE_ORPHANS=1.
    Run it again after changing system.env or run.env; `drgpu up` also proves the result.
    On an error it prints `false`, so that the eval fails too.
    """
    from drgpu.commands import drfc_stack  # lazy: start-up time

    try:
        exports = drfc_stack.drfc_env(evaluation=evaluation)
    except BaseException:
        sys.stdout.write("false\n")  # what the shell evaluates fails: `&& dr-start-...` stops
        raise
    sys.stdout.write(exports)


@_command("drgpu gpus --full", "drgpu gpus --json > box.json")
def gpus(
    full: Annotated[bool, typer.Option("--full", help="Show whole UUIDs.")] = False,
    json_output: Json = False,
) -> None:
    """List this host's GPUs in nvidia-smi (PCI bus) order, with CUDA's order beside, and which
    drgpu run holds each."""
    from drgpu.commands import gpus as gpus_command  # lazy: start-up time
    from drgpu.ui.tables import failure_shown, show_gpus  # lazy: start-up time

    with failure_shown(json_output=json_output):
        result = gpus_command.gpus()
    show_gpus(result, json_output=json_output, full=full)


def _a_number(value: float) -> float:
    """A float option that is a number (click's range lets `nan` through)."""
    if math.isnan(value):
        raise typer.BadParameter("nan is not a number of seconds")
    return value


@_command(
    "drgpu status --watch",
    "drgpu status --watch --json --interval 5 --run-id 0",
    "drgpu status --watch --influx udp://127.0.0.1:8092 --prometheus 9400",
    "drgpu status --watch --on-violation 'logger -t drgpu'",
)
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
        float,
        typer.Option(
            "--interval",
            min=0.1,
            max=86400.0,  # a day
            callback=_a_number,
            help="Seconds between refreshes.",
        ),
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
    influx: Annotated[
        str | None,
        typer.Option(
            "--influx",
            metavar="URL",
            help="With --watch: send every refresh as InfluxDB line protocol to"
            " udp://HOST:PORT (DRfC's Telegraf: udp://127.0.0.1:8092) or"
            " http(s)://HOST:PORT/write?db=NAME.",
        ),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(
            "--prometheus",
            metavar="ADDR",
            help="With --watch: serve /metrics for Prometheus on [ADDRESS:]PORT (a bare"
            " PORT or :PORT listens on 127.0.0.1 only; write 0.0.0.0:PORT for every address).",
        ),
    ] = None,
    on_violation: Annotated[
        str | None,
        typer.Option(
            "--on-violation",
            metavar="CMD",
            help="With --watch: run CMD (split as a shell splits words; no shell) once per new"
            " violation, the violation as JSON on stdin and in DRGPU_VIOLATION_* variables;"
            " rate-limited (docs/metrics.md).",
        ),
    ] = None,
) -> None:
    """Each run's containers, their GPUs, and every GPU process mapped to its container.

    Exits 6 when a process runs on a GPU its service was not given, or belongs to no stack.
    """
    from drgpu.commands import status as status_command  # lazy: start-up time
    from drgpu.ui.live import show_status  # lazy: start-up time
    from drgpu.ui.tables import failure_shown  # lazy: start-up time

    options = status_command.StatusOptions(
        run_id=run_id,
        evaluation=evaluation,
        watch=watch,
        interval_s=interval,
        count=count,
        json_lines=json_output,
        influx=influx,
        prometheus=prometheus,
        on_violation=on_violation,
    )
    with failure_shown(json_output=json_output):
        result = status_command.status(options)
    show_status(None if result.watched else result.last, json_output=json_output)
    if result.failure is not None:
        raise result.failure


@_command("drgpu report", "drgpu report --run-id 0 --json", "drgpu report --eval")
def report(
    env_file: EnvFile = None,
    run_id: Annotated[
        str | None, typer.Option("--run", "--run-id", help="Only this run (default: every run).")
    ] = None,
    evaluation: Annotated[
        bool,
        typer.Option("--eval", help="The run's evaluation (--run, or DR_RUN_ID of the settings)."),
    ] = False,
    json_output: Json = False,
) -> None:
    """What each run cost in GPU time, energy, peak memory, utilisation and time throttled, per
    service and worker, as `status --watch` measured it (also for a run that has ended)."""
    from drgpu.commands.report import report as report_command  # lazy: start-up time
    from drgpu.ui.tables import failure_shown, show_report  # lazy: start-up time

    with failure_shown(json_output=json_output):
        result = report_command(env_file, run_id, evaluation=evaluation)
    show_report(result, json_output=json_output)


@_command(
    "drgpu doctor",
    "drgpu doctor --probe --image awsdeepracercommunity/deepracer-robomaker:5.2.1-gpu",
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
        bool, typer.Option("--probe", help="Start a short container with a GPU device request.")
    ] = False,
    json_output: Json = False,
) -> None:
    """Check the host: driver, NVML, Docker, the NVIDIA container toolkit, Compose, images.

    Exits 6 when a check fails (warnings pass).
    """
    from drgpu.commands import doctor as doctor_command  # lazy: start-up time
    from drgpu.ui.tables import failure_shown, show_doctor  # lazy: start-up time

    inputs = _inputs(env_file, files=file, needs_files=False)
    with failure_shown(json_output=json_output):
        result = doctor_command.doctor(inputs, image or [], probe=probe)
    _show(show_doctor, result, json_output=json_output)


@_command(
    "drgpu cuda-check --all",
    "drgpu cuda-check --expect 1 --frameworks torch   (inside a container)",
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
        from drgpu import probe  # lazy: start-up time of the other commands

        argv = ["--json"] if json_output else []
        argv += ["--expect", str(expect)] if expect is not None else []
        argv += [arg for uuid in expect_uuid or [] for arg in ("--expect-uuid", uuid)]
        argv += ["--frameworks", frameworks] if frameworks else []
        raise typer.Exit(probe.main(argv, usage_error=_usage_error))
    from drgpu.commands import cuda_check as cuda_check_command  # lazy: start-up time
    from drgpu.ui.tables import failure_shown, show_cuda_check  # lazy: start-up time

    with failure_shown(json_output=json_output):
        result = cuda_check_command.check_stack(
            service,
            all_services=all_services,
            run_id=run_id,
            env_file=env_file,
            evaluation=evaluation,
        )
    _show(show_cuda_check, result, json_output=json_output)


@_command("drgpu swarm-setup", "drgpu swarm-setup --inventory box.json --json")
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
    from drgpu.commands import swarm_setup as swarm_setup_command  # lazy: start-up time
    from drgpu.ui.tables import failure_shown, show_swarm_setup  # lazy: start-up time

    with failure_shown(json_output=json_output):
        result = swarm_setup_command.swarm_setup(inventory, daemon_json, toolkit_config, env_file)
    _show(show_swarm_setup, result, json_output=json_output)


@_command("drgpu example-env -o system.env", "drgpu example-env | less")
def example_env(
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write it to this new file (never over one)."),
    ] = None,
) -> None:
    """Print system.env.example: every setting drgpu reads, with its default."""
    from drgpu.host.files import example_settings, write_new_file  # lazy: start-up time

    text = example_settings()
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_new_file(output, text)
        sys.stderr.write(f"drgpu: wrote {output}\n")


@_command("drgpu version", "drgpu --version")
def version() -> None:
    """Print drgpu's version."""
    typer.echo(__version__)


def _usage_error(message: str) -> NoReturn:
    """A usage problem the probe finds, as drgpu's own one-line error (exit 2)."""
    raise ConfigError(message)


def _fail(message: str, hint: str | None, code: int) -> NoReturn:
    sys.stderr.write(f"drgpu: error: {one_line(message)}\n")
    if hint:
        sys.stderr.write(f"  hint: {one_line(hint)}\n")
    raise SystemExit(code)


@functools.cache
def _built(name: str | None) -> click.Command:
    """drgpu's click group, built once a process; with command `name` (of argv[0]) only that
    command in it (typer builds every command's options from its signature: a good part of a
    start-up). Shell completion passes None: it needs them all."""
    named = {
        typer.main.get_command_name(getattr(i.callback, "__name__", "")): i
        for i in app.registered_commands
    }
    if name not in named:
        return typer.main.get_command(app)
    one = copy.copy(app)
    one.registered_commands = [named[name]]
    return typer.main.get_command(one)


def _refuse_a_newer_typer() -> None:
    """typer 0.20 and later carry their own click, which drgpu's help classes are not."""
    if tuple(int(part) for part in typer.__version__.split(".")[:2]) >= (0, 20):
        raise ConfigError(
            f"drgpu needs typer below 0.20 (pyproject.toml), this Python has {typer.__version__}",
            hint="pip install 'typer>=0.15,<0.20'",
        )


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; the one place where errors turn into messages and exit codes (see
    ExitCode), where the signals drgpu catches start unwinding, and where output is
    kept free of secrets."""
    argv = sys.argv[1:] if argv is None else argv
    with redacting_output(os.environ), signals.caught():
        try:
            _refuse_a_newer_typer()
            command = _built(argv[0] if argv and "_DRGPU_COMPLETE" not in os.environ else None)
            trace.configure(os.environ)  # DRGPU_LOG
            code = command.main(args=argv, prog_name="drgpu", standalone_mode=False)
        except DrgpuError as exc:
            _fail(exc.message, exc.hint, exc.exit_code)
        except click.exceptions.NoArgsIsHelpError as exc:  # `drgpu` alone: its help
            sys.stdout.write(exc.format_message())
            raise SystemExit(ExitCode.OK) from None
        except click.ClickException as exc:
            message = exc.format_message()
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
