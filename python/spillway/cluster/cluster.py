"""A Ray cluster as Spillway sees it: its live nodes on a ring, one block
store per node, and the file system's operations.

:func:`local` starts a simulated cluster on this machine (one Ray node per
simulated node, ``ray.cluster_utils.Cluster``), inside a loopback-only
network namespace unless told otherwise; :func:`connect` joins a running
Ray cluster. Every operation first compares the ring with Ray's live nodes:
a node that died since is taken off the ring and its copies are made again
from the survivors before the operation goes on.

Those repairs (and the moves to a node that joins) run in a background
thread, one after another. Blocks left with a single live copy are copied
at once; the others wait until no job runs, so that a job running when a
node leaves goes on at full speed (its reads fall back to another holder
while a copy is missing), as a distributed file system gives its
re-replication a low priority. Jobs and file operations that start later
wait for the repairs first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

from .. import _args
from ..errors import InvalidArgumentError, SpillwayError
from . import fs, network
from ._ray import ray
from .fs import FileStat, Members
from .ring import Ring, replication_factor
from .store import BlockStore

NAMESPACE = "spillway"
# A simulated node N carries one unit of the resource NODE_RESOURCE + "N".
NODE_RESOURCE = "spillway_node_"
NODES_MAX = 256
BLOCK_BYTES_DEFAULT = 64 << 20
# How long a killed simulated node may take to be seen dead.
NODE_DEATH_SECONDS = 60
# Health checks of a simulated cluster: a killed node is seen dead in
# about two seconds (Ray's defaults take much longer). Idle workers are kept
# two minutes, not one second: a task that waits on its calls gives its CPU
# back, Ray starts a worker for the next task, and with the default it kills
# one and starts another at every wait (docs/cluster.md).
LOCAL_SYSTEM_CONFIG = {
    "health_check_period_ms": 500,
    "health_check_failure_threshold": 4,
    "idle_worker_killing_time_threshold_ms": 120_000,
}
# Ray refuses an object store under about 75 MiB.
OBJECT_STORE_BYTES_MIN = 80 << 20
OBJECT_STORE_BYTES_DEFAULT = 256 << 20

PathLike = Union[str, os.PathLike]


# A node's store as a Ray actor: no CPU reserved (it waits on its disk), a
# few calls at once (each on its own files).
_STORE_ACTOR = ray.remote(num_cpus=0, max_concurrency=8)(BlockStore)


def _node_name(node: Dict[str, Any]) -> str:
    """``node-N`` for node N of a simulated cluster (its marker resource),
    else ``node-`` and the start of its Ray id: the same in every driver."""
    for resource in node.get("Resources", {}):
        if resource.startswith(NODE_RESOURCE):
            return f"node-{resource[len(NODE_RESOURCE):]}"
    return f"node-{node['NodeID'][:8]}"


def quiet_environment(scratch: Path) -> Dict[str, str]:
    """The environment every Ray process of a local cluster gets: no usage
    reports (and a loopback address for any that is tried anyway), its
    files and home under ``scratch``."""
    return {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
        "RAY_TMPDIR": str(scratch / "ray"),
        "HOME": str(scratch / "home"),
    }


class Cluster:
    """The cluster's file system and membership. Get one from :func:`local`
    or :func:`connect`."""

    def __init__(
        self,
        directory: Path,
        replication: Optional[int],
        *,
        address: Optional[str] = None,
        local: Any = None,
        node_args: Optional[Dict[str, Any]] = None,
    ):
        self.directory = directory
        self._replication = replication
        self._local = local
        self._node_args = node_args or {}
        self._names: Dict[str, str] = {}
        self._stores: Dict[str, Any] = {}
        self._ring: Optional[Ring] = None
        self.address: str = local.address if local is not None else address
        self._local_nodes: Dict[str, Any] = {}
        # Simulated nodes removed so far: a new one gets the next number.
        self._removed = 0
        # Rebalances after membership changes, in order, in one thread.
        self._repairs = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spillway-repairs")
        self._pending: List[Future] = []
        # Jobs running: repairs that can wait, wait for none to run, unless
        # someone waits for the repairs (``hurry``).
        self._jobs = 0
        self._hurry = False
        self._jobs_changed = threading.Condition()
        if local is not None:
            self._local_nodes = {node.node_id: node for node in local.list_all_nodes()}
        self.refresh()

    # Membership.

    def refresh(self) -> int:
        """Brings the ring up to date with Ray's live nodes and waits until
        every copy is where it belongs (the repairs and moves of membership
        changes done); returns the blocks copied. Raises the first repair
        that failed (a block with no good copy left, say)."""
        self._follow()
        return self.repaired()

    def repaired(self) -> int:
        """Waits for the repairs queued so far (those waiting for running
        jobs then go on at once); returns the blocks they copied, or raises
        the first that failed."""
        pending, self._pending = self._pending, []
        with self._jobs_changed:
            self._hurry = True
            self._jobs_changed.notify_all()
        try:
            wait(pending)
        finally:
            with self._jobs_changed:
                self._hurry = False
        failed = next((future.exception() for future in pending if future.exception() is not None), None)
        if failed is not None:
            raise SpillwayError(f"repairing the file system after a membership change failed: {failed}") from failed
        return sum(future.result() for future in pending)

    def _follow(self) -> None:
        """Brings the ring up to date with Ray's live nodes; when it changed,
        queues the rebalance that gives every block to its new holders."""
        live = [node for node in ray.nodes() if node["Alive"]]
        if not live:
            raise SpillwayError("the Ray cluster has no live node")
        alive = sorted(node["NodeID"] for node in live)
        before = self._ring
        if before is not None and list(before.nodes) == alive:
            return
        for node in live:
            self._names.setdefault(node["NodeID"], _node_name(node))
        for node_id in alive:
            if node_id not in self._stores:
                self._stores[node_id] = self._start_store(node_id)
        for node_id in list(self._stores):
            if node_id not in alive:
                del self._stores[node_id]
        self._ring = Ring(alive)
        if before is not None:
            self._queue_rebalance(before)

    def settle(self, since: Ring, names: List[str]) -> None:
        """Follows a membership change made during a job, and queues placing
        again the files ``names`` (its outputs), written with the ring
        ``since`` it started with, when the ring changed meanwhile."""
        self._follow()
        if self._ring != since and names:
            self._queue_rebalance(since, set(names))

    def _queue_rebalance(self, before: Ring, names: Optional[set] = None) -> None:
        self._pending.append(self._repairs.submit(self._rebalance, self._members(), before, names))

    def _rebalance(self, members: Members, before: Ring, names: Optional[set]) -> int:
        copied = fs.rebalance(members, before, names, fs.URGENT)
        with self._jobs_changed:
            self._jobs_changed.wait_for(lambda: self._jobs == 0 or self._hurry)
        return copied + fs.rebalance(members, before, names, fs.REST)

    def _current_ring(self) -> Ring:
        """The ring of the nodes alive now (a job places its later phases'
        tasks by it, so that none is aimed at a node lost midway)."""
        self._follow()
        return self._ring

    @contextlib.contextmanager
    def _job(self) -> Iterator[Members]:
        """While a job runs: the cluster's members when it started (after
        the repairs queued before it), and repairs that can wait, waiting."""
        self.refresh()
        with self._jobs_changed:
            self._jobs += 1
        try:
            yield self._members()
        finally:
            with self._jobs_changed:
                self._jobs -= 1
                self._jobs_changed.notify_all()

    def close(self) -> None:
        """Waits for the queued repairs (raising the first that failed) and
        stops the thread that runs them."""
        try:
            self.repaired()
        finally:
            self._repairs.shutdown(wait=True)

    def nodes(self) -> List[Dict[str, Any]]:
        """The live nodes: name, Ray node id, blocks and bytes held, share
        of the ring."""
        self.refresh()
        ids = list(self._ring.nodes)
        held = ray.get([self._stores[node].usage.remote() for node in ids])
        return [
            {"name": self._names[node], "id": node, "share": self._ring.share(node), **usage}
            for node, usage in zip(ids, held)
        ]

    def add_node(self) -> str:
        """Starts one more simulated node (local clusters only); the blocks
        its ring range now covers move to it in the background (``refresh()``
        waits for them). Returns its name."""
        local = self._require_local("add_node")
        index = len(self._local_nodes) + self._removed
        node = local.add_node(**self._node_args, resources={f"{NODE_RESOURCE}{index}": 1})
        local.wait_for_nodes()
        self._local_nodes[node.node_id] = node
        self._follow()
        return self._names[node.node_id]

    def remove_node(self, index: int) -> str:
        """Kills simulated node ``index`` (as ``nodes()`` numbers them; not
        0, the node this driver is attached to) without warning, as a
        crash would, and returns its name once Ray sees it dead; its copies
        are made again from the survivors in the background."""
        local = self._require_local("remove_node")
        live = [node for node in self._ring.nodes]
        names = {self._names[node]: node for node in live}
        index = _args.count(index, "index", 0)
        name = f"node-{index}"
        if name not in names:
            raise InvalidArgumentError(f"no live node {name}; the live nodes are {', '.join(sorted(names))}")
        node_id = names[name]
        ray_node = self._local_nodes.get(node_id)
        if ray_node is None or ray_node is local.head_node:
            raise InvalidArgumentError(f"{name} is the head node, which this driver is attached to; remove another")
        local.remove_node(ray_node, allow_graceful=False)
        del self._local_nodes[node_id]
        self._removed += 1
        # Ray marks the node dead once its health checks fail.
        deadline = time.monotonic() + NODE_DEATH_SECONDS
        while any(node["NodeID"] == node_id and node["Alive"] for node in ray.nodes()):
            if time.monotonic() > deadline:
                raise SpillwayError(f"{name} was killed but Ray still lists it alive after {NODE_DEATH_SECONDS} s")
            time.sleep(0.1)
        self._follow()
        return name

    # The file system.

    def put(self, local_path: PathLike, name: str, *, format: str = "text", block_bytes: Union[int, str] = BLOCK_BYTES_DEFAULT) -> FileStat:
        """Stores the local file ``local_path`` as ``name``, cut into blocks
        of about ``block_bytes`` at record boundaries of ``format`` (text,
        tsv, csv: lines; gensort: 100-byte records; kv: the chunks of a
        job's binary output), each on ``replication`` nodes."""
        block_bytes = _args.size(block_bytes, "block_bytes", 1)
        self.refresh()
        return fs.put(self._members(), local_path, name, format, block_bytes)

    def get(self, name: str, local_path: PathLike) -> FileStat:
        """Writes the file ``name`` to ``local_path``, whole or not at all;
        a damaged copy of a block is read from another holder and repaired."""
        self.refresh()
        return fs.get(self._members(), name, local_path)

    def ls(self) -> List[str]:
        self.refresh()
        return fs.ls(self._members())

    def stat(self, name: str) -> FileStat:
        self.refresh()
        return fs.stat(self._members(), name)

    def rm(self, name: str) -> None:
        self.refresh()
        fs.rm(self._members(), name)

    def mapreduce(self, job: str, inputs: Union[str, List[str]], output: str, **options: Any):
        """Runs built-in job ``job`` (as :func:`spillway.mapreduce.run` names
        them, with its parameters ``n``, ``k``, ``pattern``, ...) over files
        of the cluster's file system, writing ``OUTPUT/part-PPPPP.tsv`` files
        into it (or into ``output_dir`` on each reducer's node). Options:
        ``partitions`` (default: one per node), ``output_format`` (text or
        binary), ``piece_bytes_min``, ``progress(phase, done, total)``.
        Returns a :class:`~spillway.cluster.mapreduce.ClusterJobReport`."""
        from . import mapreduce

        return mapreduce.run(self, job, inputs, output, **options)

    def sort(self, input: str, output: str, **options: Any):
        """Sorts the gensort file ``input`` of the cluster's file system
        across the nodes, TritonSort's 2-IO way: each node sorts one key
        range and keeps its output (``NODEDIR/sorted/OUTPUT/``). Options:
        ``memory`` (per node's sort), ``sync``, ``progress(phase, done,
        total)``. Returns a :class:`~spillway.cluster.sort.ClusterSortReport`
        whose ``valsort`` checks the whole output."""
        from . import sort

        return sort.run(self, input, output, **options)

    def node_name(self, node_id: str) -> str:
        """The name (``node-N``) of the node with Ray id ``node_id``."""
        return self._names[node_id]

    def store_directory(self, node_id: str) -> Path:
        """Where the node with Ray id ``node_id`` keeps its blocks (on its
        own disk)."""
        return self.directory / node_id

    # Internals.

    def _members(self) -> Members:
        factor = replication_factor(self._replication, self._ring.nodes)
        # Copies: a job keeps the members it started with while refresh()
        # changes the cluster's.
        return Members(self._ring, dict(self._stores), factor, dict(self._names))

    def _start_store(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return _STORE_ACTOR.options(
            name=f"spillway-store-{node_id}",
            namespace=NAMESPACE,
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote(str(self.store_directory(node_id)))

    def _require_local(self, what: str) -> Any:
        if self._local is None:
            raise InvalidArgumentError(f"{what} works on a simulated cluster from spillway.cluster.local() only")
        return self._local


@contextlib.contextmanager
def local(
    nodes: int = 4,
    cpus_per_node: int = 1,
    object_store_bytes: Union[int, str] = OBJECT_STORE_BYTES_DEFAULT,
    *,
    directory: Optional[PathLike] = None,
    replication: Optional[int] = None,
    isolated: bool = True,
) -> Iterator[Cluster]:
    """A simulated cluster of ``nodes`` Ray nodes on this machine, shut down
    on exit. Blocks live in ``directory`` (a temporary directory removed on
    exit when not given). With ``isolated`` (the default) this process must
    run in a loopback-only network namespace (``spillway cluster local --
    COMMAND`` puts it there)."""
    nodes = _args.count(nodes, "nodes", 1, NODES_MAX)
    cpus_per_node = _args.count(cpus_per_node, "cpus_per_node", 1, _args.THREADS_MAX)
    object_store_bytes = _args.size(object_store_bytes, "object_store_bytes", OBJECT_STORE_BYTES_MIN)
    if replication is not None:
        replication = _args.count(replication, "replication", 1, nodes)
    if isolated:
        network.require_isolation("spillway.cluster.local()")
    if ray.is_initialized():
        raise SpillwayError("Ray is already initialized in this process; shut it down (ray.shutdown()) first")
    # Short, so that Ray's socket paths stay under the 107-byte limit.
    scratch = Path(tempfile.mkdtemp(prefix="spillway-ray-", dir="/tmp"))
    environment = quiet_environment(scratch)
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    for folder in ("ray", "home"):
        (scratch / folder).mkdir()
    node_args = {
        "num_cpus": cpus_per_node,
        "object_store_memory": object_store_bytes,
        "node_ip_address": "127.0.0.1",
        "include_dashboard": False,
    }
    ray_cluster = None
    try:
        from ray.cluster_utils import Cluster as RayCluster

        head_args = dict(node_args, resources={f"{NODE_RESOURCE}0": 1}, _system_config=LOCAL_SYSTEM_CONFIG)
        ray_cluster = RayCluster(initialize_head=True, head_node_args=head_args)
        for index in range(1, nodes):
            ray_cluster.add_node(**node_args, resources={f"{NODE_RESOURCE}{index}": 1})
        ray_cluster.wait_for_nodes()
        ray.init(address=ray_cluster.address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
        data = Path(directory) if directory is not None else scratch / "data"
        cluster = Cluster(data, replication, local=ray_cluster, node_args=node_args)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if ray_cluster is not None:
            ray_cluster.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(scratch, ignore_errors=True)


def connect(address: str, directory: PathLike, *, replication: Optional[int] = None) -> Cluster:
    """The running Ray cluster at ``address`` (``HOST:PORT`` of its head).
    Every node keeps its blocks under ``directory`` on its own disk. The
    cluster should have token authentication on (``RAY_AUTH_MODE=token``;
    see docs/cluster.md)."""
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    return Cluster(Path(directory), replication, address=address)
