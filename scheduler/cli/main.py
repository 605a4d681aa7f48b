"""The `gang-scheduler` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from scheduler.process.logs import LOG_FORMATS, LOG_LEVELS
from scheduler.process.version import python_version, version
from scheduler.sim.defaults import DEFAULT_LOAD, DEFAULT_SEED, DEFAULT_TIMELINE_LOAD, TRACES

if TYPE_CHECKING:
    from scheduler.agent.deviceplugin import DevicePluginConfig


# The simulator, the demo and rich are imported by these two commands only: `run` starts
# faster without them (issue 13), and so does the node agent.
def _demo(args: argparse.Namespace) -> int:
    from scheduler.cli.simulate import demo

    return demo(args)


def _simulate(args: argparse.Namespace) -> int:
    from scheduler.cli.simulate import simulate

    return simulate(args)


# --- node agent --------------------------------------------------------------------------------
def device_plugin_config(args: argparse.Namespace) -> DevicePluginConfig | None:
    """The device plugin's settings from `node-agent`'s options; None with
    --no-device-plugin. The isolation mode, when none is given, is isolation.DEFAULT_MODES
    (cdi: docs/decisions.md, "GPU isolation defaults to CDI")."""
    if args.no_device_plugin:
        return None
    # Imported here: gRPC and the agent are needed by no other command.
    from pathlib import Path

    from scheduler.agent.allocation import DEFAULT_SCHEDULER_NAMES
    from scheduler.agent.deviceplugin import DevicePluginConfig
    from scheduler.agent.isolation import DEFAULT_MODES

    return DevicePluginConfig(
        node_name="",  # the agent's
        directory=Path(args.device_plugin_dir),
        unit=args.vgpu_unit,
        health_interval=args.health_interval,
        watch_interval=args.socket_check_interval,
        schedulers=tuple(args.trusted_scheduler or DEFAULT_SCHEDULER_NAMES),
        isolation=tuple(args.isolation or DEFAULT_MODES),
        mps=args.mps,
        whole_gpus=args.whole_gpus,
        key_secret=args.assignment_key_secret,
    )


def _node_agent(args: argparse.Namespace) -> int:
    # Imported here: the agent's API client and NVML are needed by no other command.
    from scheduler.agent.publisher import AgentOptions, run_node_agent

    plugin = device_plugin_config(args)
    return run_node_agent(
        AgentOptions(
            node_name=args.node_name,
            kubeconfig=args.kubeconfig,
            interval=args.interval,
            once=args.once,
            dry_run=args.dry_run,
            metrics_port=None if args.metrics_port < 0 else args.metrics_port,
            metrics_address=args.metrics_address,
            attribution_interval=args.attribution_interval,
            pod_resources_socket=args.pod_resources_socket,
            pod_resources_interval=args.pod_resources_interval,
            dra=args.dra,
            sysfs=args.sysfs,
            print_resource_slices=args.print_resourceslices,
            dra_withdraw=args.dra_withdraw,
            kubelet_registry_dir=args.kubelet_registry_dir,
            kubelet_plugins_dir=args.kubelet_plugins_dir,
            cdi_dir=args.cdi_dir,
        ),
        device_plugin=plugin,
    )


# --- run -----------------------------------------------------------------------------------------
def _run(args: argparse.Namespace) -> int:
    # Imported here: the API client and the server are needed by no other command.
    from scheduler.process.startup import StartupError, collector_paused_while_loading

    with collector_paused_while_loading():
        import asyncio
        import logging
        import signal
        import time

        from scheduler.kube.runner import run_scheduler
        from scheduler.process.config import ConfigError, load_config
        from scheduler.process.logs import configure_logging, log_event

    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"gang-scheduler run: {error}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)

    async def until_signalled() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop_on(signum: signal.Signals) -> None:
            # The one line that says why the scheduler stops (the runner logs the rest).
            log_event(logging.getLogger("scheduler.cli"), "signal received", signal=signum.name)
            stop.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop_on, signum)
        # Wall-clock time drives the core, so /debug/gangs shows real times; a clock
        # step only shifts a backoff or a reservation's expiry.
        return await run_scheduler(
            config, args.kubeconfig, clock=time.time, stop=stop, config_path=args.config
        )

    try:
        return asyncio.run(until_signalled())
    except StartupError as error:
        print(f"gang-scheduler run: error: {error}", file=sys.stderr)
        return 2


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a mistake on the command line is one line on stderr and
    exit code 2, as every other mistake the CLI reports (`--help` shows the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gang-scheduler",
        description="A Kubernetes scheduler for learning tasks: all-or-nothing gangs, "
        "fractional GPUs, GPU topology.",
    )
    shown_version = f"gang-scheduler {version()} (Python {python_version()})"
    parser.add_argument("--version", action="version", version=shown_version)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="schedule a built-in demo cluster and learning tasks; print placements"
    )
    demo.set_defaults(handler=_demo)
    simulate = commands.add_parser(
        "simulate",
        help="replay the openb GPU cluster trace through the scheduling core (FGD paper "
        "protocol), or learning tasks over time (--workload/--generate); report per policy",
        description="Replay an openb-format trace as the FGD paper (USENIX ATC'23) does: "
        "every pod tried once in a seeded arrival order with clones up to --load x the "
        "cluster's GPUs; report GPU allocation at 100% and 130% arrived load. "
        "Defaults: the bundled node list and default trace, policies bestfit, fgd and "
        "this project's best, seed 42. "
        "With --workload or --generate: a time-based replay of learning tasks (gangs that "
        "arrive, wait, run and leave) on --cluster, policies binpack and spread by default; "
        "report GPU utilization, queueing delay by gang size, job completion time, the "
        "largest gang's wait, GPU link scores and partial gangs. See docs/simulator.md.",
    )
    simulate.add_argument("--nodes", metavar="PATH", help="node CSV in the openb format")
    simulate.add_argument(
        "--pods", metavar="PATH", help="pod CSV in the openb format (overrides --trace)"
    )
    simulate.add_argument(
        "--trace",
        metavar="NAME",
        help=f"bundled pod list: {', '.join(TRACES)} (default: default)",
    )
    simulate.add_argument(
        "--dra",
        action="store_true",
        help="openb replay through DRA devices: each node's GPUs a ResourceSlice of shared "
        "devices, each GPU pod's request a ResourceClaim (see docs/simulator.md)",
    )
    simulate.add_argument(
        "--workload",
        metavar="PATH",
        help="time-based replay of the learning tasks in this YAML workload file",
    )
    simulate.add_argument(
        "--generate",
        metavar="N",
        type=int,
        help="time-based replay of N synthetic learning tasks drawn with --seed",
    )
    simulate.add_argument(
        "--cluster",
        metavar="PATH",
        help="cluster for the time-based replay: a YAML of node pools or an openb node CSV "
        "(default: the bundled 64-node mixed cluster)",
    )
    simulate.add_argument(
        "--policy",
        metavar="NAME",
        action="append",
        help="policy to run; repeatable (default: bestfit, fgd and the project's best; "
        "time-based replay: binpack and spread; fgd, fgd-complete and "
        "fgd-complete-reserve also known)",
    )
    simulate.add_argument(
        "--seed",
        metavar="N",
        type=int,
        action="append",
        help=f"arrival-order (or --generate) seed; repeatable (default: {DEFAULT_SEED}; "
        "the paper: 42..51)",
    )
    simulate.add_argument(
        "--load",
        type=float,
        help="arrived GPU load the clones fill up to, x cluster GPU (default: "
        f"{DEFAULT_LOAD}); with --generate, the offered GPU load (default: "
        f"{DEFAULT_TIMELINE_LOAD})",
    )
    simulate.add_argument(
        "--jobs",
        metavar="N",
        type=int,
        help="openb replays (one per policy and seed) run in up to N processes "
        "(default: the CPUs available)",
    )
    simulate.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout instead of a table"
    )
    simulate.add_argument(
        "--plot",
        metavar="PATH.png",
        help="write GPU allocation against arrived load here (time-based replay: GPU "
        "utilization and queue length over time)",
    )
    tenants = simulate.add_argument_group(
        "tenants (time-based replay; docs/simulator.md, 'Tenants')"
    )
    tenants.add_argument(
        "--teams",
        metavar="PATH",
        help="time-based replay of a multi-team workload generated from this team file "
        "with --seed ('default': the bundled three teams)",
    )
    tenants.add_argument(
        "--quotas",
        metavar="PATH",
        help="ElasticQuotas (a YAML list) the replay applies; report per team and compare "
        "the sharing modes ('default': the bundled quotas of the three teams)",
    )
    tenants.add_argument(
        "--mode",
        metavar="NAME",
        action="append",
        help="with --quotas: sharing mode to run; repeatable (default: all: no-quotas, "
        "no-borrowing, borrowing, reclaim, reclaim-guard)",
    )
    tenants.add_argument(
        "--preemption-grace",
        metavar="SECONDS",
        type=float,
        help="seconds a preempted gang takes to terminate (default: 30)",
    )
    topology = simulate.add_argument_group(
        "required topology (time-based replay; docs/simulator.md, 'Required topology')"
    )
    topology.add_argument(
        "--require-topology",
        metavar="FRACTION",
        type=float,
        help="with --generate: this fraction of the gangs of several pods require one "
        "rack or one NVLink clique of the cluster file's rack_nodes/clique_nodes (default: 0)",
    )
    topology.add_argument(
        "--domain-choice",
        metavar="NAME",
        action="append",
        help="which domain of a required level a gang gets; repeatable, each run per "
        "policy and seed: smallest (this scheduler's default), learnt, best-fit (least "
        "free capacity, as Kueue's TAS), first-fit (by name)",
    )
    simulate.set_defaults(handler=_simulate)
    agent = commands.add_parser(
        "node-agent",
        help="discover this node's GPUs with NVML and publish them on its Node object "
        "(the node-agent DaemonSet)",
        description="Discover the node's GPUs with NVML (model, memory, UUID, NUMA node, "
        "pairwise NVLink/PCIe topology, health) and publish the "
        "gang-scheduler.io/gpu-topology annotation, plus GFD-style nvidia.com/gpu.* labels "
        "the node lacks when GPU feature discovery is absent; patch only when something "
        "changed, re-check every --interval seconds. Without a GPU or NVML: one log line, "
        "the node left unannotated, and no exit. See docs/node-agent.md.",
    )
    agent.add_argument(
        "--node-name",
        metavar="NAME",
        help="the Node to publish on (default: $NODE_NAME, set by the DaemonSet)",
    )
    agent.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file (default: in-cluster service account, else $KUBECONFIG or "
        "~/.kube/config)",
    )
    agent.add_argument(
        "--interval",
        metavar="SECONDS",
        type=float,
        default=60.0,
        help="seconds between checks (default: 60)",
    )
    agent.add_argument("--once", action="store_true", help="one check, then exit")
    agent.add_argument(
        "--dry-run",
        action="store_true",
        help="print the JSON merge patch that would be written instead of writing it "
        "(without a node name: the patch for a node with no annotation or labels)",
    )
    served = agent.add_argument_group(
        "metrics and probes",
        "/metrics (per-GPU, DCGM exporter names), /healthz, /readyz (docs/node-agent.md); "
        "not served with --once or --dry-run",
    )
    served.add_argument(
        "--metrics-port",
        metavar="PORT",
        type=int,
        default=10271,
        help="port of /metrics, /healthz and /readyz; -1 serves none (default: 10271)",
    )
    served.add_argument(
        "--metrics-address",
        metavar="ADDRESS",
        default="0.0.0.0",
        help="address to listen on (default: 0.0.0.0)",
    )
    served.add_argument(
        "--attribution-interval",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="seconds between reads of the node's pods that attribute GPUs to pods in the "
        "metrics; 0 turns attribution off (default: 30)",
    )
    agent.add_argument(
        "--pod-resources-socket",
        metavar="PATH",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="the kubelet's pod-resources API, read to report on the Node which GPUs the "
        "kubelet really gave each nvidia.com/gpu pod (default: "
        "/var/lib/kubelet/pod-resources/kubelet.sock)",
    )
    agent.add_argument(
        "--pod-resources-interval",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="seconds between reads of the pod-resources API; 0 turns the report off "
        "(default: 10; docs/node-agent.md)",
    )
    dra = agent.add_argument_group(
        "DRA driver",
        "the node's GPUs as ResourceSlices of gpu.gang-scheduler.io and the kubelet's DRA "
        "plugin (docs/node-agent.md, 'DRA mode'); opt-in",
    )
    dra.add_argument(
        "--dra",
        action="store_true",
        help="publish the node's ResourceSlices at every pass (and serve the kubelet's "
        "DRA plugin where it is not a single pass or a dry run)",
    )
    dra.add_argument(
        "--print-resourceslices",
        action="store_true",
        help="discover once, print the ResourceSlices DRA mode would publish as a JSON "
        "List, and exit; needs no API server",
    )
    dra.add_argument(
        "--dra-withdraw",
        action="store_true",
        help="delete this node's ResourceSlices of gpu.gang-scheduler.io and exit (opting "
        "out of DRA mode)",
    )
    dra.add_argument(
        "--kubelet-registry-dir",
        metavar="PATH",
        default="/var/lib/kubelet/plugins_registry",
        help="where the kubelet's plugin watcher looks for registration sockets "
        "(default: /var/lib/kubelet/plugins_registry)",
    )
    dra.add_argument(
        "--kubelet-plugins-dir",
        metavar="PATH",
        default="/var/lib/kubelet/plugins",
        help="the DRA socket is <this>/gpu.gang-scheduler.io/dra.sock "
        "(default: /var/lib/kubelet/plugins)",
    )
    dra.add_argument(
        "--cdi-dir",
        metavar="PATH",
        default="/var/run/cdi",
        help="where the prepared claims' CDI specs are written (default: /var/run/cdi)",
    )
    dra.add_argument(
        "--sysfs",
        metavar="PATH",
        default="/sys",
        help="where sysfs is mounted, read for each GPU's PCIe root (default: /sys)",
    )
    plugin = agent.add_argument_group(
        "vGPU device plugin",
        "nvidia.com/vgpu for the kubelet, honouring gang-scheduler.io/gpu-devices "
        "(docs/device-plugin.md); not started with --once or --dry-run",
    )
    plugin.add_argument(
        "--no-device-plugin",
        action="store_true",
        help="publish the GPU topology only; do not serve nvidia.com/vgpu to the kubelet",
    )
    plugin.add_argument(
        "--device-plugin-dir",
        metavar="DIR",
        default="/var/lib/kubelet/device-plugins",
        help="the kubelet's device-plugin directory, where kubelet.sock is "
        "(default: /var/lib/kubelet/device-plugins)",
    )
    plugin.add_argument(
        "--vgpu-unit",
        metavar="MILLI",
        type=int,
        default=1,
        help="milli-GPU per share-device; a divisor of 1000 (default 1: 1000 share-devices "
        "per GPU, nvidia.com/vgpu counts milli as the scheduler does)",
    )
    plugin.add_argument(
        "--health-interval",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="seconds between NVML health checks of the advertised GPUs (default: 10)",
    )
    plugin.add_argument(
        "--socket-check-interval",
        metavar="SECONDS",
        type=float,
        default=1.0,
        help="seconds between checks that the plugin socket and kubelet.sock are unchanged "
        "(default: 1)",
    )
    plugin.add_argument(
        "--trusted-scheduler",
        metavar="NAME",
        action="append",
        help="a schedulerName whose gang-scheduler.io/gpu-devices assignments are honoured "
        "(repeatable; default: gang-scheduler)",
    )
    plugin.add_argument(
        "--isolation",
        metavar="MODE",
        action="append",
        choices=("envvar", "device-nodes", "cdi"),
        help="how a container is handed its GPUs: cdi (CDI names nvidia.com/gpu=<uuid>, "
        "the default: needs a CDI-enabled runtime and the node's CDI spec), device-nodes "
        "(/dev/nvidiaN device specs), envvar (NVIDIA_VISIBLE_DEVICES, the fallback for "
        "runtimes without CDI); repeatable to combine (docs/device-plugin.md)",
    )
    plugin.add_argument(
        "--mps",
        action="store_true",
        help="an NVIDIA MPS control daemon serves the node's GPUs: give share containers "
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT and CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
        "(docs/device-plugin.md)",
    )
    plugin.add_argument(
        "--whole-gpus",
        choices=("label", "on", "off"),
        default="label",
        help="also serve nvidia.com/gpu, each container getting the GPUs the scheduler "
        "assigned, in place of NVIDIA's device plugin (which must not run on the node): "
        "on, off, or label (when the node has gang-scheduler.io/whole-gpus=true at "
        "start-up; default; docs/device-plugin.md, 'Whole GPUs')",
    )
    plugin.add_argument(
        "--assignment-key-secret",
        default="kube-system/gang-scheduler-node-agent-key",
        metavar="NAMESPACE/NAME",
        help="the Secret of the node agents' keys, which the scheduler writes at start: "
        "an assignment is served only when the scheduler's node signature verifies "
        "(default: %(default)s; empty: not checked, the admission policy alone guards "
        "assignments; docs/security.md)",
    )
    agent.set_defaults(handler=_node_agent)
    run = commands.add_parser(
        "run",
        help="schedule pods on a Kubernetes cluster (the scheduler Deployment)",
        description="Watch pods, nodes and PodGroups, and bind gangs all-or-nothing onto "
        "nodes and GPUs; serve /metrics, /healthz, /readyz (and /debug/gangs on loopback). "
        "What stops it from starting is one line on stderr and exit status 2. With leader "
        "election (the default) only the replica holding the Lease schedules. SIGTERM "
        "stops it cleanly. See docs/kubernetes.md.",
    )
    run.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file (default: in-cluster service account, else $KUBECONFIG or "
        "~/.kube/config)",
    )
    run.add_argument(
        "--config",
        metavar="PATH.yaml",
        help="scheduler configuration (default: every option at its default; "
        "see docs/configuration.md)",
    )
    run.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="log level (default: info)",
    )
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text: time level logger: message key=value...; json: one JSON object per "
        "line (default: text; docs/operator-guide.md)",
    )
    run.set_defaults(handler=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    try:
        result: int = handler(args)
    except BrokenPipeError:
        # The reader went away (`simulate | head`): nothing more to say, and nothing
        # to say it to. Point stdout at /dev/null so the interpreter's final flush
        # does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
