"""Host discovery for a process group: the address of this machine that the other ranks reach.

The rendezvous store is served by rank 0 on :func:`store_host` (127.0.0.1 for local workers; on a
Dask cluster the address by which this machine reaches the scheduler, or ``DQNLAB_STORE_HOST``);
every rank's gloo listens on its address on the route to the store's host (:func:`route_address`).
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import psutil

from .dask import active_dask_client

__all__ = ["store_host", "route_address", "route_interface"]


def store_host() -> str:
    """The address of this machine that every rank can reach, for the rendezvous store.

    ``DQNLAB_STORE_HOST`` if set; on a Dask cluster (joblib's active backend), the
    address this machine uses to reach the scheduler (127.0.0.1 for a local one);
    otherwise 127.0.0.1 (loky workers are local processes).
    """
    if os.environ.get("DQNLAB_STORE_HOST"):
        return os.environ["DQNLAB_STORE_HOST"]
    client = active_dask_client()
    if client is None:
        return "127.0.0.1"
    scheduler = urlparse(client.scheduler.address)
    if scheduler.hostname in (None, "localhost", "127.0.0.1"):
        return "127.0.0.1"
    return route_address(scheduler.hostname, scheduler.port or 8786)


def route_address(host: str, port: int = 9) -> str:
    """The address of this machine on its route to ``host`` (``host`` itself when it is one of this machine's).

    No packet is sent: a UDP socket's ``connect`` only picks the route.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return s.getsockname()[0]


def route_interface(host: str) -> str:
    """The name of this machine's network interface on its route to ``host`` (``lo`` for 127.0.0.1 on Linux).

    Raises
    ------
    RuntimeError
        If no interface holds the route's address (:func:`route_address`).
    """
    address = route_address(host)
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return name
    raise RuntimeError(f"no network interface holds {address}, this machine's address on its route to {host}; "
                       f"set GLOO_SOCKET_IFNAME to the interface the other ranks reach")
