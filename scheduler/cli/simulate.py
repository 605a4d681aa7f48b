"""The `simulate` and `demo` commands: kept apart from scheduler.cli.main so that
`gang-scheduler run` (and the node agent) start without importing the simulator, the demo
and rich, which only these commands use (issue 13: first bind within 1 s of start-up)."""

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cache.pod import pod_from_api
from scheduler.cli.demo import run_demo
from scheduler.planner.required_domain import DomainChoice
from scheduler.sim import profiles as openb_policies
from scheduler.sim import timeline as timeline_policies
from scheduler.sim.cluster_spec import (
    ClusterSpecError,
    bundled_text,
    default_cluster,
    gpu_pools,
    load_cluster,
    topology_levels,
)
from scheduler.sim.defaults import (
    DEFAULT_LOAD,
    DEFAULT_SEED,
    DEFAULT_TIMELINE_LOAD,
    NODE_FILE,
    TRACES,
)
from scheduler.sim.openb import (
    OpenbFormatError,
    OpenbPod,
    arrival_order,
    bundled_file,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.parallel import available_cpus, run_jobs
from scheduler.sim.replay import OpenbResult, replay_openb
from scheduler.sim.report import (
    PolicyRun,
    TimelineRun,
    failures_table,
    plot_allocation,
    plot_timeline,
    results_json,
    results_table,
    timeline_json,
    timeline_tables,
)
from scheduler.sim.teams import TeamsError, generate_teams, parse_teams
from scheduler.sim.tenant_report import (
    ModeFigures,
    plot_tenants,
    team_figures,
    tenants_json,
    tenants_table,
)
from scheduler.sim.tenants import (
    MODE_NAMES,
    Quota,
    QuotaFileError,
    mode_named,
    parse_quotas,
    run_mode,
)
from scheduler.sim.timeline import DEFAULT_PREEMPTION_GRACE, replay_timeline
from scheduler.sim.topology_figures import DOMAIN_CHOICES
from scheduler.sim.workload import (
    Task,
    WorkloadError,
    generate_workload,
    load_workload,
    offered_load,
)

# `--teams default` and `--quotas default`: the bundled three teams and their quotas.
BUNDLED_TEAMS = "teams-3.yaml"
BUNDLED_QUOTAS = "quotas-3.yaml"


def demo(args: argparse.Namespace) -> int:
    report = run_demo()
    console = Console(width=max(Console().width, 120))
    placed = Table(title="Placed learning tasks (all members bound, or none)")
    for column in ("gang", "pod", "node", "GPU devices (index:milli)", "worst GPU link"):
        placed.add_column(column)
    for row in report.placed:
        placed.add_row(row.gang, row.pod, row.node, row.devices, row.links)
    console.print(placed)
    waiting = Table(title="Waiting (holding no resources)")
    waiting.add_column("gang")
    waiting.add_column("why", overflow="fold")
    for key, message in report.waiting:
        waiting.add_row(key, message)
    console.print(waiting)
    return 0


class _UsageError(Exception):
    """A mistake in what the user asked for: one line on stderr, exit code 2."""


@contextlib.contextmanager
def _reading(what: str, *format_errors: type[Exception]) -> Iterator[None]:
    """A file the user named that cannot be read or parsed: one usage line naming it
    (`what` when the error names no file), never a traceback."""
    unreadable: tuple[type[Exception], ...] = (UnicodeDecodeError, *format_errors)
    try:
        yield
    except OSError as error:
        raise _UsageError(f"cannot read {error.filename or what}: {error.strerror}") from None
    except unreadable as error:
        raise _UsageError(str(error)) from None


def _load_trace(args: argparse.Namespace) -> tuple[list[dict[str, object]], list[OpenbPod]]:
    if args.trace not in TRACES:
        raise _UsageError(f"unknown trace {args.trace!r}; known: {', '.join(TRACES)}")
    with _reading("the trace", OpenbFormatError):
        nodes = load_nodes(Path(args.nodes) if args.nodes else bundled_file(NODE_FILE))
        pods = load_pods(Path(args.pods) if args.pods else bundled_file(TRACES[args.trace]))
    if not nodes:
        raise _UsageError("the node list has no nodes")
    return nodes, pods


def simulate(args: argparse.Namespace) -> int:
    try:
        return _run_simulation(args)
    except _UsageError as error:
        print(f"gang-scheduler simulate: error: {error}", file=sys.stderr)
        return 2


def _run_simulation(args: argparse.Namespace) -> int:
    if args.workload is not None or args.generate is not None or args.teams is not None:
        if getattr(args, "dra", False):
            raise _UsageError("--dra is for the openb replay: drop --workload, --generate, --teams")
        return _run_timeline(args)
    dra = bool(getattr(args, "dra", False))
    if args.cluster is not None:
        raise _UsageError("--cluster is for the time-based replay: give --workload or --generate")
    for name in ("require_topology", "domain_choice"):
        if getattr(args, name, None) is not None:
            flag = f"--{name.replace('_', '-')}"
            raise _UsageError(f"{flag} is for the time-based replay: give --workload or --generate")
    if args.quotas is not None:
        raise _UsageError(
            "--quotas is for the time-based replay: give --teams, --workload or --generate"
        )
    args.trace = args.trace or "default"
    args.load = DEFAULT_LOAD if args.load is None else args.load
    if not (args.load > 0 and math.isfinite(args.load)):
        raise _UsageError(f"--load must be a number > 0, got {args.load}")
    if args.plot and not Path(args.plot).parent.is_dir():
        # Found out now, not after minutes of replays.
        raise _UsageError(f"cannot write the plot {args.plot}: no such directory")
    nodes, pods = _load_trace(args)
    size = cluster_size(nodes)
    if not size.total_gpu_milli:
        raise _UsageError("the node list has no GPU")
    # Module attributes, read at call time, so that tests can put stand-ins there.
    catalogue = openb_policies
    policies: list[str] = list(
        dict.fromkeys(args.policy or ["bestfit", "fgd", catalogue.BEST_POLICY])
    )
    unknown = [name for name in policies if name not in catalogue.OPENB_POLICIES]
    if unknown:
        raise _UsageError(
            f"unknown policy {unknown[0]!r}; known: {', '.join(catalogue.OPENB_POLICIES)}"
        )
    seeds: list[int] = list(dict.fromkeys(args.seed or [DEFAULT_SEED]))
    if args.jobs is not None and args.jobs < 1:
        raise _UsageError(f"--jobs must be at least 1, got {args.jobs}")
    # FGD's target workload: the trace's original pods, as the paper takes it.
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    orders = {seed: arrival_order(pods, size.total_gpu_milli, seed, args.load) for seed in seeds}
    trace = None if args.pods else args.trace

    console = Console(stderr=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    total = len(policies) * sum(len(order) for order in orders.values())
    jobs = [(policy, seed) for policy in policies for seed in seeds]
    workers = min(args.jobs or available_cpus(), len(jobs))
    # Built here, before any worker forks: the workers inherit them.
    job_profiles = [
        catalogue.openb_profile(
            policy,
            seed=seed,
            max_cpu_milli=size.max_cpu_milli,
            max_gpu_milli=size.max_gpu_milli,
            history=history,
            cluster_cpu_milli=size.total_cpu_milli,
            cluster_gpu_milli=size.total_gpu_milli,
        )
        for policy, seed in jobs
    ]
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("simulating", total=total)

        def replay(index: int) -> OpenbResult:
            policy, seed = jobs[index]
            profile = job_profiles[index]
            if workers > 1:  # in a worker process: progress is counted per finished replay
                return replay_openb(nodes, orders[seed], profile, dra=dra)
            progress.update(task, description=f"{policy} seed {seed}")
            base = sum(len(orders[s]) for _, s in jobs[:index])

            def advance(done: int, _count: int) -> None:
                progress.update(task, completed=base + done)

            return replay_openb(nodes, orders[seed], profile, advance, dra=dra)

        def finished(index: int) -> None:
            if workers > 1:
                progress.update(task, advance=len(orders[jobs[index][1]]))

        if workers > 1:
            progress.update(task, description=f"{len(jobs)} replays, {workers} processes")
        results = run_jobs(len(jobs), replay, workers, finished)
    runs = [
        PolicyRun(policy, seed, result)
        for (policy, seed), result in zip(jobs, results, strict=True)
    ]

    title = f"openb {trace or Path(args.pods).name}: GPU allocation vs arrived load"
    if dra:
        title += " (GPUs through DRA devices)"
    return _report(
        args,
        plot=lambda path: plot_allocation(runs, path, title),
        as_json=lambda: results_json(runs),
        tables=lambda: [_through_dra(results_table(runs, trace), dra), failures_table(runs)],
        width=120,
    )


def _through_dra(table: Table, dra: bool) -> Table:
    """The results table, its title saying when the GPUs went through DRA devices."""
    if dra:
        table.title = f"{table.title} (GPUs through DRA devices)"
    return table


def _report(
    args: argparse.Namespace,
    *,
    plot: Callable[[Path], None],
    as_json: Callable[[], object],
    tables: Callable[[], Sequence[Table]],
    width: int,
) -> int:
    """What both replays print: the plot when asked, then JSON or the tables."""
    if args.plot:
        try:
            plot(Path(args.plot))
        except (OSError, ValueError) as error:
            raise _UsageError(f"cannot write the plot {args.plot}: {error}") from None
    if args.json:
        print(json.dumps(as_json()))
        return 0
    out = Console(width=max(Console().width, width))
    for table in tables():
        out.print(table)
    if args.plot:
        out.print(f"plot written to {args.plot}")
    return 0


# --- part 2: learning tasks over time ---------------------------------------------------------
def _timeline_cluster(args: argparse.Namespace) -> list[dict[str, object]]:
    with _reading("the cluster file", ClusterSpecError):
        nodes = load_cluster(Path(args.cluster)) if args.cluster else default_cluster()
    if not cluster_size(nodes).total_gpu_milli:
        raise _UsageError("the cluster has no GPU")
    return nodes


def _timeline_workloads(
    args: argparse.Namespace, nodes: list[dict[str, object]]
) -> list[tuple[int | None, list[Task]]]:
    """(seed, tasks) per workload to replay: the file once, or one generated per seed."""
    if args.teams is not None:
        text, source = _file_or_bundled(args.teams, BUNDLED_TEAMS, "team file")
        try:
            teams = parse_teams(text, source)
        except TeamsError as error:
            raise _UsageError(str(error)) from None
        total = cluster_size(nodes).total_gpu_milli // 1000
        return [
            (seed, generate_teams(teams, seed, total, pools=gpu_pools(nodes)))
            for seed in dict.fromkeys(args.seed or [DEFAULT_SEED])
        ]
    if args.workload is not None:
        with _reading("the workload", WorkloadError):
            return [(None, load_workload(Path(args.workload)))]
    if args.generate < 1:
        raise _UsageError(f"--generate needs a number of tasks >= 1, got {args.generate}")
    gpus = cluster_size(nodes).total_gpu_milli // 1000
    pools = gpu_pools(nodes)
    share = getattr(args, "require_topology", None) or 0.0
    levels = topology_levels(nodes)
    if share and not levels:
        raise _UsageError(
            "--require-topology needs a cluster with racks or NVLink cliques "
            "(pool fields rack_nodes, clique_nodes: docs/simulator.md)"
        )
    seeds: list[int] = list(dict.fromkeys(args.seed or [DEFAULT_SEED]))
    workloads: list[tuple[int | None, list[Task]]] = []
    for seed in seeds:
        tasks = generate_workload(
            seed, args.generate, gpus, args.load, pools=pools, required_share=share, levels=levels
        )
        offered = offered_load(tasks, gpus)
        if offered is not None and offered < 0.9 * args.load:
            print(
                f"gang-scheduler simulate: note: {args.generate} tasks (seed {seed}) offer "
                f"only {offered:.2f} x the cluster's {gpus} GPUs, not {args.load:g}: too few "
                "for this cluster; ask for more with --generate",
                file=sys.stderr,
            )
        workloads.append((seed, tasks))
    return workloads


def _file_or_bundled(value: str, bundled: str, what: str) -> tuple[str, str]:
    """The text of the file `value` names (or of the bundled file for 'default'), and
    the name to quote in messages."""
    if value == "default":
        return bundled_text(bundled), bundled
    try:
        return Path(value).read_text(encoding="utf-8"), value
    except OSError as error:
        raise _UsageError(f"cannot read the {what} {value}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise _UsageError(f"cannot read the {what} {value}: not UTF-8 text") from None


def _run_timeline(args: argparse.Namespace) -> int:
    sources = [
        f"--{name}" for name in ("workload", "generate", "teams") if getattr(args, name) is not None
    ]
    if len(sources) > 1:
        # Said as before --teams existed when those two are given.
        both = (
            "--workload or --generate"
            if args.teams is None
            else "one of --workload, --generate and --teams"
        )
        raise _UsageError(f"give {both}, not both" if len(sources) == 2 else f"give {both}")
    if args.teams is not None and args.load is not None:
        raise _UsageError("--load is for --generate: a team file sets each team's arrival rate")
    if args.quotas is None:
        for name in ("mode", "preemption_grace"):
            if getattr(args, name) is not None:
                raise _UsageError(f"--{name.replace('_', '-')} needs --quotas")
    given = [name for name in ("nodes", "pods", "trace") if getattr(args, name) is not None]
    if given:
        raise _UsageError(
            f"--{given[0]} is for the openb replay; the time-based replay takes --cluster"
        )
    if args.load is None and args.teams is None:
        args.load = DEFAULT_TIMELINE_LOAD
    if args.load is not None and not (args.load > 0 and math.isfinite(args.load)):
        raise _UsageError(f"--load must be a number > 0, got {args.load}")
    if args.plot and not Path(args.plot).parent.is_dir():
        raise _UsageError(f"cannot write the plot {args.plot}: no such directory")
    choices = _domain_choices(args)
    catalogue = timeline_policies
    policies: list[str] = list(dict.fromkeys(args.policy or catalogue.DEFAULT_TIMELINE_POLICIES))
    unknown = [name for name in policies if name not in catalogue.TIMELINE_POLICIES]
    if unknown:
        raise _UsageError(
            f"unknown policy {unknown[0]!r} for the time-based replay; known: "
            f"{', '.join(catalogue.TIMELINE_POLICIES)}"
        )
    nodes = _timeline_cluster(args)
    workloads = _timeline_workloads(args, nodes)
    if args.quotas is not None:
        if choices != [None]:
            raise _UsageError("--domain-choice is not compared with --quotas: run it without")
        return _run_tenants(args, nodes, workloads, policies if args.policy else None)

    runs: list[TimelineRun] = []
    console = Console(stderr=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    total = len(policies) * len(choices) * sum(len(tasks) for _, tasks in workloads)
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        bar = progress.add_task("simulating", total=total)
        done_before = 0
        for policy in policies:
            for choice in choices:
                for seed, tasks in workloads:
                    profile = catalogue.timeline_profile(policy)
                    label = policy if choice is None else f"{policy}, {choice}"
                    label = label if seed is None else f"{label} seed {seed}"
                    progress.update(bar, description=label)
                    base = done_before

                    def advance(done: int, _count: int, base: int = base) -> None:
                        progress.update(bar, completed=base + done)

                    result = replay_timeline(
                        nodes, tasks, profile, progress=advance, domain_choice=choice
                    )
                    done_before += len(tasks)
                    runs.append(TimelineRun(policy, seed, result))

    title = _timeline_title(args)
    return _report(
        args,
        plot=lambda path: plot_timeline(runs, path, title),
        as_json=lambda: timeline_json(runs),
        tables=lambda: timeline_tables(runs, title),
        width=140,
    )


def _domain_choices(args: argparse.Namespace) -> list[DomainChoice | None]:
    """The domain choices to run (each per policy and seed); [None]: the planner's."""
    names = getattr(args, "domain_choice", None)
    share = getattr(args, "require_topology", None)
    if share is not None:
        if args.generate is None:
            raise _UsageError(
                "--require-topology is for --generate (a workload file says it per task)"
            )
        if not (0.0 <= share <= 1.0):
            raise _UsageError(f"--require-topology must be a fraction in [0, 1], got {share}")
    if not names:
        return [None]
    chosen: list[DomainChoice | None] = []
    for name in dict.fromkeys(names):
        choice = DOMAIN_CHOICES.get(name)
        if choice is None:
            raise _UsageError(f"unknown domain choice {name!r}; known: {', '.join(DOMAIN_CHOICES)}")
        chosen.append(choice)
    return chosen


def _timeline_title(args: argparse.Namespace) -> str:
    if args.workload is not None:
        source = Path(args.workload).name
    elif args.teams is not None:
        name = BUNDLED_TEAMS if args.teams == "default" else Path(args.teams).name
        source = f"teams of {name}"
    else:
        source = f"{args.generate} generated tasks, load {args.load:g}"
        share = getattr(args, "require_topology", None)
        if share:
            source += f", {share:g} of the gangs requiring a rack or clique"
    cluster = Path(args.cluster).name if args.cluster else "bundled 64-node cluster"
    return f"{source} on {cluster}"


# --- tenants: quotas and the sharing modes ---------------------------------------------------
def _run_tenants(
    args: argparse.Namespace,
    nodes: list[dict[str, object]],
    workloads: list[tuple[int | None, list[Task]]],
    policies: list[str] | None,
) -> int:
    text, source = _file_or_bundled(args.quotas, BUNDLED_QUOTAS, "quotas file")
    try:
        quotas: list[Quota] = parse_quotas(text, source)
    except QuotaFileError as error:
        raise _UsageError(str(error)) from None
    try:
        modes = [mode_named(name) for name in dict.fromkeys(args.mode or MODE_NAMES)]
    except ValueError as error:
        raise _UsageError(str(error)) from None
    grace = DEFAULT_PREEMPTION_GRACE if args.preemption_grace is None else args.preemption_grace
    if not (grace >= 0 and math.isfinite(grace)):
        raise _UsageError(f"--preemption-grace must be a number of seconds >= 0, got {grace}")
    # One policy unless asked: the comparison is between modes.
    chosen = policies or [timeline_policies.DEFAULT_TIMELINE_POLICIES[0]]
    jobs = [
        (policy, seed, tasks, mode)
        for policy in chosen
        for seed, tasks in workloads
        for mode in modes
    ]
    console = Console(stderr=True)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    figures: list[ModeFigures] = []
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        bar = progress.add_task("simulating", total=sum(len(job[2]) for job in jobs))
        done_before = 0
        for policy, seed, tasks, mode in jobs:
            progress.update(
                bar, description=f"{mode.name} {policy}" + ("" if seed is None else f" seed {seed}")
            )

            def advance(done: int, _count: int, base: int = done_before) -> None:
                progress.update(bar, completed=base + done)

            run = run_mode(
                nodes,
                tasks,
                quotas,
                mode,
                policy=policy,
                seed=seed,
                preemption_grace=grace,
                progress=advance,
            )
            done_before += len(tasks)
            figures.append(team_figures(run, quotas))
    title = f"{_timeline_title(args)}, quotas {Path(source).name}"
    return _report(
        args,
        plot=lambda path: plot_tenants(figures, path, title),
        as_json=lambda: tenants_json(figures),
        tables=lambda: [tenants_table(figures, title)],
        width=170,
    )
