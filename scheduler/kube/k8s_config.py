"""kubernetes_asyncio's configuration loaders, imported without its generated API.

Importing anything under kubernetes_asyncio runs the package's __init__, which imports
the whole generated client: every API group and about a thousand model classes, 0.1-0.2 s
of `gang-scheduler run`'s start-up (issue 13: first bind within 1 s of the process
starting) for code the scheduler never calls, since KubeClient speaks raw JSON
(scheduler/kube/client.py says why). What it does use is the kubeconfig and in-cluster
loaders (credential plugins, OIDC, token refresh included), `Configuration`, and
`ApiClient` for its TLS connection pool.

So, when nothing has imported kubernetes_asyncio yet, its packages `kubernetes_asyncio`,
`kubernetes_asyncio.client` and `kubernetes_asyncio.client.models` are registered as
deferred packages: their submodules import as usual, and a package's own __init__ runs
the first time someone reads a name that only it defines (`from kubernetes_asyncio
import watch`, `kubernetes_asyncio.client.V1Pod`). Code that wants the whole library in
the same process (the tests, a plugin) still gets it, only later; nothing changes in
what the loaders do.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_DEFERRED = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


class _DeferredPackage(types.ModuleType):
    """A package whose __init__ has not run yet: it runs on the first read of a name
    the package does not have so far."""

    _loaded = False

    def __getattr__(self, name: str) -> Any:
        # Dunder probes (inspect, pickle, copy) are answered without loading, except
        # __all__, which `from package import *` needs.
        if self._loaded or (name.startswith("__") and name != "__all__"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        self._loaded = True
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(self)
        return getattr(self, name)


def _defer(name: str) -> None:
    spec = importlib.util.find_spec(name)  # imports the (deferred) parent, runs nothing
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _DeferredPackage
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _defer_generated_client() -> None:
    for name in _DEFERRED:
        _defer(name)
    # Before api_client, which does `from kubernetes_asyncio.client import rest`: a
    # submodule already imported is an attribute, and reading it loads nothing.
    importlib.import_module("kubernetes_asyncio.client.exceptions")
    importlib.import_module("kubernetes_asyncio.client.rest")
    client = sys.modules["kubernetes_asyncio.client"]
    # The two names kubernetes_asyncio.config reads from the client package.
    client.Configuration = importlib.import_module(  # type: ignore[attr-defined]
        "kubernetes_asyncio.client.configuration"
    ).Configuration
    client.ApiClient = importlib.import_module(  # type: ignore[attr-defined]
        "kubernetes_asyncio.client.api_client"
    ).ApiClient


def _forget_partial_import() -> None:
    for name in [
        n for n in sys.modules if n == "kubernetes_asyncio" or n.startswith("kubernetes_asyncio.")
    ]:
        del sys.modules[name]


if "kubernetes_asyncio" not in sys.modules:
    try:
        _defer_generated_client()
    except Exception:
        # A release of the library laid out otherwise than this expects: import it the
        # ordinary way (start-up pays the generated client again, nothing else changes).
        _forget_partial_import()

# The names the scheduler uses; the imports below find the modules registered above.
from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402
from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402
from kubernetes_asyncio.config import kube_config  # noqa: E402
from kubernetes_asyncio.config.config_exception import ConfigException  # noqa: E402
from kubernetes_asyncio.config.incluster_config import load_incluster_config  # noqa: E402
from kubernetes_asyncio.config.kube_config import load_kube_config  # noqa: E402

__all__ = [
    "ApiClient",
    "ConfigException",
    "Configuration",
    "kube_config",
    "load_incluster_config",
    "load_kube_config",
]
