"""scheduler/kube/k8s_config.py: kubernetes_asyncio's configuration loaders without its
generated API (issue 13: start-up time), and the whole library still there for code that
asks for it later in the same process. Each case runs in a fresh interpreter, since
which modules get imported is the point."""

from __future__ import annotations

import json
import subprocess
import sys


def run(program: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_api_client_does_not_import_the_generated_models_and_apis() -> None:
    result = run(
        "import json, sys\n"
        "import scheduler.kube.client, scheduler.kube.connect\n"
        "print(json.dumps({'modules': sorted(sys.modules)}))"
    )
    modules = result["modules"]
    assert isinstance(modules, list)
    generated = [
        m
        for m in modules
        if m.startswith(("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api."))
    ]
    assert generated == []
    # What the client does use is there.
    assert "kubernetes_asyncio.config.kube_config" in modules
    assert "kubernetes_asyncio.client.api_client" in modules


def test_the_whole_library_loads_when_asked_for_afterwards() -> None:
    result = run(
        "import json\n"
        "import scheduler.kube.client as ours\n"
        "import kubernetes_asyncio\n"
        "from kubernetes_asyncio import client, watch\n"
        "from kubernetes_asyncio.client import V1Pod\n"
        "import kubernetes_asyncio.client.models as models\n"
        "print(json.dumps({\n"
        "    'pod': V1Pod(metadata=client.V1ObjectMeta(name='a')).metadata.name,\n"
        "    'node': models.V1Node.__name__,\n"
        "    'watch': watch.Watch.__name__,\n"
        "    'api': client.CoreV1Api.__name__,\n"
        "    'same': client.ApiClient is ours.ApiClient,\n"
        "    'version': kubernetes_asyncio.__version__ == client.__version__,\n"
        "    'all': 'V1Pod' in models.__dict__ and len(dir(client)) > 800,\n"
        "}))"
    )
    assert result == {
        "pod": "a",
        "node": "V1Node",
        "watch": "Watch",
        "api": "CoreV1Api",
        "same": True,
        "version": True,
        "all": True,
    }


def test_a_library_laid_out_otherwise_is_imported_the_ordinary_way() -> None:
    # As if a release moved the REST module: the deferral gives up, forgets what it
    # registered, and the loaders come from the library imported as usual.
    result = run(
        "import importlib, json, sys\n"
        "real = importlib.import_module\n"
        "def moved(name, *args):\n"
        "    if name == 'kubernetes_asyncio.client.rest':\n"
        "        raise ImportError(name)\n"
        "    return real(name, *args)\n"
        "importlib.import_module = moved\n"
        "import scheduler.kube.k8s_config as k8s\n"
        "importlib.import_module = real\n"
        "import kubernetes_asyncio.client as client\n"
        "print(json.dumps({\n"
        "    'loader': k8s.load_kube_config.__module__,\n"
        "    'generated': 'kubernetes_asyncio.client.models.v1_pod' in sys.modules,\n"
        "    'same': client.ApiClient is k8s.ApiClient,\n"
        "}))"
    )
    assert result == {
        "loader": "kubernetes_asyncio.config.kube_config",
        "generated": True,
        "same": True,
    }
