"""Connecting to the API server at start-up, with one clear line when it cannot be done.

`connect` loads the client configuration (a kubeconfig file, or the in-cluster service
account), asks the API server for its version (`GET /version`, readable by every client:
the default `system:public-info-viewer` ClusterRole), and logs what is in use: the
server's URL and version and where the credentials came from. Whatever stops it (a
missing, unreadable, malformed or directory kubeconfig, a pod without its service-account
token, a certificate file that is not there, a server that refuses the connection or the
credentials, a TLS failure, no answer in time) is a `StartupError` whose message names
the file or the server: the CLI prints it as one line and exits with status 2.

A server that cannot be reached at start is not waited for: the process exits and its
Deployment restarts it with the kubelet's back-off, which is also where an operator sees
it (`kubectl logs --previous`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from scheduler.kube.client import ApiError, KubeClient, create_client
from scheduler.kube.k8s_config import ConfigException, kube_config
from scheduler.process.logs import log_event
from scheduler.process.startup import StartupError, os_error_text

log = logging.getLogger(__name__)

# How long the first request (GET /version) may take, connection included.
VERSION_TIMEOUT_SECONDS = 10.0
IN_CLUSTER = "in-cluster service account"


@dataclass(frozen=True)
class ApiServer:
    """The API server in use, as logged at start-up."""

    url: str
    version: str  # gitVersion, e.g. v1.33.1
    platform: str
    credentials: str  # "kubeconfig <path>" or IN_CLUSTER


def credentials_source(kubeconfig: str | None) -> str:
    """Where create_client takes its configuration from (its rules, said in words)."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return IN_CLUSTER
    path = kubeconfig if kubeconfig is not None else kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    return f"kubeconfig {path}"


def _check_readable(kubeconfig: str | None) -> None:
    """A kubeconfig path that does not name a readable YAML mapping: kubernetes_asyncio
    reads a missing file as an empty configuration and then complains about
    `current-context`, and a directory or a scalar document ends in a traceback, so these
    are told here first, naming the file."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return
    path = kubeconfig if kubeconfig is not None else kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    if kubeconfig is None and kube_config.ENV_KUBECONFIG_PATH_SEPARATOR in path:
        return  # a $KUBECONFIG list: the loader merges what exists
    where = "kubeconfig" if kubeconfig is not None else "no --kubeconfig given, and kubeconfig"
    try:
        text = Path(path).expanduser().read_bytes()
    except OSError as error:
        raise StartupError(f"{where} {path}: {os_error_text(error)}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise StartupError(f"{where} {path}: not valid YAML: {_yaml_problem(error)}") from None
    if not isinstance(document, dict):
        raise StartupError(
            f"{where} {path}: not a kubeconfig (a YAML mapping with clusters, users and "
            f"contexts), got {type(document).__name__}"
        )


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's complaint and where, on one line."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"{error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(error).split())


async def open_client(kubeconfig: str | None, *, qps: float, burst: int) -> KubeClient:
    """`create_client`, its failures as StartupError."""
    _check_readable(kubeconfig)
    source = credentials_source(kubeconfig)
    try:
        return await create_client(kubeconfig, qps=qps, burst=burst)
    except ConfigException as error:
        raise StartupError(f"{source}: {error}") from None
    except yaml.YAMLError as error:
        raise StartupError(f"{source}: not valid YAML: {_yaml_problem(error)}") from None
    except OSError as error:  # a client certificate or CA file named in it is missing
        name = f" {error.filename}" if error.filename else ""
        raise StartupError(f"{source}: cannot read{name}: {os_error_text(error)}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        # The loader indexes the document as it expects it to be: a scalar, a list where
        # a mapping belongs, a field of the wrong type.
        raise StartupError(
            f"{source}: not a valid kubeconfig ({type(error).__name__}: {error})"
        ) from None


async def server_version(
    client: KubeClient, credentials: str, timeout: float = VERSION_TIMEOUT_SECONDS
) -> ApiServer:
    """GET /version; StartupError when the server cannot be reached or refuses."""
    url = str(client.api.configuration.host or "")
    try:
        answer = await client.request_json(
            "GET", "/version", timeout=aiohttp.ClientTimeout(total=timeout)
        )
    except ApiError as error:
        raise StartupError(f"the API server at {url} ({credentials}) answered {error}") from None
    except ConfigException as error:  # a credential plugin or token refresh failed
        raise StartupError(f"{credentials}: {error}") from None
    except TimeoutError:
        raise StartupError(
            f"cannot reach the API server at {url} ({credentials}): no answer in {timeout:g} s"
        ) from None
    except (aiohttp.ClientError, OSError, ValueError) as error:
        detail = str(error) or type(error).__name__
        raise StartupError(
            f"cannot reach the API server at {url} ({credentials}): {detail}"
        ) from None
    return ApiServer(
        url=url,
        version=str(answer.get("gitVersion") or "unknown"),
        platform=str(answer.get("platform") or ""),
        credentials=credentials,
    )


async def connect(
    kubeconfig: str | None, *, qps: float, burst: int
) -> tuple[KubeClient, ApiServer]:
    """A client whose API server answered, and that server; StartupError otherwise (the
    client is closed then)."""
    client = await open_client(kubeconfig, qps=qps, burst=burst)
    try:
        server = await server_version(client, credentials_source(kubeconfig))
    except BaseException:
        await client.close()
        raise
    log_event(
        log,
        "connected to the API server",
        server=server.url,
        version=server.version,
        platform=server.platform,
        credentials=server.credentials,
    )
    return client, server
