"""Fixtures shared by the adapter's tests: an API emulator and a client talking to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from scheduler.kube.client import KubeClient
from tests.kubeapi import KubeApiEmulator, api_client


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    async with KubeApiEmulator() as emulator:
        yield emulator


@pytest_asyncio.fixture
async def client(api: KubeApiEmulator) -> AsyncIterator[KubeClient]:
    async with KubeClient(await api_client(api.base_url)) as kube:
        yield kube
