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
