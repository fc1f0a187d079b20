"""What one Dask task computes: pure pandas and numpy functions of one partition, a module a stage
(`features`, `buckets`, `confirm`, `roots`, `decisions`; `ccstar` for components on the cluster),
each testable without a cluster."""
