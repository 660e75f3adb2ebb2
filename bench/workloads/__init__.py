"""Every benchmark workload, declared as data (see declarations.py for the vocabulary).

Adding a workload: declare a `Workload` in a module of this package and add it to `WORKLOADS` below.
"""

from __future__ import annotations

from declarations import Workload
from workloads.agg import AGG, AGG_H2O, AGG_MEMORY, AGG_PYTHON
from workloads.cluster import CLUSTER_INDEX, CLUSTER_SORT, CLUSTER_WORDCOUNT
from workloads.gensort import GENSORT
from workloads.knn import KNN
from workloads.kv import KV
from workloads.mr import MR_INDEX, MR_NGRAM, MR_PAGERANK, MR_SESSIONS, MR_WORDCOUNT
from workloads.pmem import PMEM
from workloads.pmemtree import PMEM_TREE
from workloads.sort import SORT
from workloads.stream import STREAM

WORKLOADS: dict[str, Workload] = {
    workload.name: workload
    for workload in [
        GENSORT, SORT, MR_WORDCOUNT, MR_NGRAM, MR_INDEX, MR_SESSIONS, MR_PAGERANK, AGG, AGG_PYTHON, AGG_H2O, AGG_MEMORY, KV, STREAM, KNN,
        PMEM, PMEM_TREE,
        CLUSTER_WORDCOUNT, CLUSTER_INDEX, CLUSTER_SORT,
    ]
}
