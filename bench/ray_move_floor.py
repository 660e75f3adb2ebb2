#!/usr/bin/env python3
"""How long Ray alone takes to move a sort's data between simulated nodes:
the floor under the cluster sort's partition phase on this machine.

    unshare --net sh -c 'ip link set lo up && exec "$@"' sh .venv/bin/python bench/ray_move_floor.py [GIB]

On a local 4-node cluster (as `cluster_peers.py` starts it), 16 tasks per
GiB (64 MiB each, the sort's groups) each send a 16 MiB piece to each of 4
receiver actors (one per node, no CPU of their own) and wait until they
have it, as the sort's partition tasks do: as out-of-band buffers, which
Ray writes straight into its object store. The receivers only count the
bytes. Nothing is read, split or
written: what is left is Ray's work (serialising, the object stores, the
transfers between nodes), on the same 2 cores as everything else.
"""

from __future__ import annotations

import pickle
import sys
import tempfile
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from spillway.cluster import local

PIECE_BYTES = 16 << 20


@ray.remote(num_cpus=0)
class Sink:
    def __init__(self) -> None:
        self.bytes = 0

    def append(self, group: int, piece) -> None:
        self.bytes += memoryview(piece).nbytes

    def total(self) -> int:
        return self.bytes


@ray.remote
def send(sinks, group: int) -> None:
    # A piece of its own for each receiver, as a partition task sends.
    ray.get([sink.append.remote(group, pickle.PickleBuffer(bytes(PIECE_BYTES))) for sink in sinks])


def main() -> int:
    gib = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    with tempfile.TemporaryDirectory(prefix="spillway-move-") as directory:
        with local(nodes=4, object_store_bytes="1G", directory=directory) as cluster:
            nodes = [node["id"] for node in cluster.nodes()]
            sinks = [Sink.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote() for node in nodes]
            ray.get([sink.total.remote() for sink in sinks])
            groups = gib * 16
            started = time.perf_counter()
            ray.get([
                send.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[group % len(nodes)], soft=True)).remote(sinks, group)
                for group in range(groups)
            ])  # fmt: skip
            seconds = time.perf_counter() - started
            moved = sum(ray.get([sink.total.remote() for sink in sinks]))
    print(f"moved {moved >> 20} MiB ({groups} x {len(nodes)} pieces of {PIECE_BYTES >> 20} MiB) in {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
