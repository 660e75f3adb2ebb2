"""Packages the workloads' peers come from, each from its registry (see install.ensure_requirements)."""

from __future__ import annotations

from declarations import Requirement

COREUTILS_DD = Requirement(executable="dd", source="apt", package="coreutils")
COREUTILS_SORT = Requirement(executable="sort", source="apt", package="coreutils")
COREUTILS_SYNC = Requirement(executable="sync", source="apt", package="coreutils")
COREUTILS_TR = Requirement(executable="tr", source="apt", package="coreutils")
PIP_PYARROW = Requirement(executable=None, source="pip", package="pyarrow", module="pyarrow")
PIP_NUMPY = Requirement(executable=None, source="pip", package="numpy", module="numpy")
PIP_DUCKDB = Requirement(executable=None, source="pip", package="duckdb", module="duckdb")
PIP_POLARS = Requirement(executable=None, source="pip", package="polars", module="polars")
PIP_PYSPARK = Requirement(executable=None, source="pip", package="pyspark", module="pyspark")
# The kNN workload's peers (versions as listed on PyPI when it was written), and what its exact answer uses.
PIP_SCIKIT_LEARN = Requirement(executable=None, source="pip", package="scikit-learn==1.9.1", module="sklearn")
PIP_FAISS_CPU = Requirement(executable=None, source="pip", package="faiss-cpu==1.15.1", module="faiss")
PIP_PYKDTREE = Requirement(executable=None, source="pip", package="pykdtree==1.4.3", module="pykdtree")
PIP_SCIPY = Requirement(executable=None, source="pip", package="scipy", module="scipy")
PIP_THREADPOOLCTL = Requirement(executable=None, source="pip", package="threadpoolctl", module="threadpoolctl")
