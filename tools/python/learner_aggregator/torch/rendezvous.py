"""Where the members of one formation of an ElasticGroup find each other: a
torch.distributed store, by a directory every member sees (one host, or a shared
file system) or by a TCP store (across hosts; serve_store() hosts one)."""

from __future__ import annotations

import datetime
import os
from typing import Any, Optional, Tuple

import torch.distributed as dist


def split_address(address: str) -> Tuple[str, int]:
    """"host:port" (or "[v6]:port") as (host, port); ValueError naming it otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"a store address is host:port, not {address!r}")
    return host.strip("[]"), int(port)


def serve_store(address: str, timeout: float = 300.0) -> Any:
    """Hosts a TCP store at `address` ("host:port") in this process, for ElasticGroups
    constructed with store_address=address on any host; it serves while the returned
    object is referenced. Host it where it outlives the members (beside the
    aggregator): a group cannot form while its store is down. One store per run."""
    host, port = split_address(address)
    return dist.TCPStore(host, port, None, True, datetime.timedelta(seconds=timeout),
                         wait_for_workers=False)


class Rendezvous:
    """Opens the store of one formation: generation `generation`, attempt `attempt`
    (a generation whose group broke is formed again under a new attempt, so no key of
    the broken one is read)."""

    def __init__(self, directory: Optional[str], address: Optional[str],
                 timeout: float) -> None:
        if (directory is None) == (address is None):
            raise ValueError("an ElasticGroup needs exactly one of rendezvous_dir "
                             "and store_address")
        self.directory = directory
        self.address = address
        self._timeout = datetime.timedelta(seconds=timeout)
        self._tcp: Any = None  # one connection to the TCP store, for all formations
        if address is not None:
            split_address(address)  # a bad address fails at construction

    def describe(self) -> str:
        return (f"rendezvous directory {self.directory}" if self.directory is not None
                else f"store {self.address}")

    def open(self, generation: int, attempt: int, world_size: int) -> Any:
        """The store the `world_size` members of this formation share."""
        prefix = f"elastic/{generation}/{attempt}/"
        if self.directory is not None:
            # A file per formation: FileStore deletes it once all its users are done.
            path = os.path.join(self.directory, f"elastic-{generation}-{attempt}.store")
            store = dist.FileStore(path, world_size)
            store.set_timeout(self._timeout)  # how long a member waits for the others
            return dist.PrefixStore(prefix, store)
        if self._tcp is None:
            host, port = split_address(str(self.address))
            self._tcp = dist.TCPStore(host, port, None, False, self._timeout,
                                      wait_for_workers=False)
        return dist.PrefixStore(prefix, self._tcp)
