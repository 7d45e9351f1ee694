"""PyVRP costs are solved once per instance data and budget, then read from the cache."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from linc_core.evaluate import pyvrp_costs
from linc_core.instances import read_solomon


def test_pyvrp_costs_are_cached_and_reused(data_dir, tmp_path):
    instance = read_solomon(data_dir / "solomon100" / "C101.txt")
    first = pyvrp_costs([instance], "dimacs", 0.3, cache=tmp_path)
    cache_file = tmp_path / "pyvrp" / "dimacs-0.3s-seed0.parquet"
    assert cache_file.is_file() and first["C101"] >= 827.3 - 1e-9
    # Edit the cached cost: a second call must read it instead of solving again.
    table = pq.read_table(cache_file)
    edited = table.set_column(
        table.schema.get_field_index("cost"), "cost", pa.array([12345.0], pa.float64())
    )
    pq.write_table(edited, cache_file)
    assert pyvrp_costs([instance], "dimacs", 0.3, cache=tmp_path) == {"C101": 12345.0}
