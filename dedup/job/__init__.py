"""The Dask job: the plan checked before any cluster starts (`plan`), the stages run top to bottom
(`pipeline`), a module a stage (`features`, `ids`, `contamination`, `buckets`, `confirm`,
`components`, `roots`, then `write`), the moves between partitions (`routing`, `graphs`), one
round trip a stage (`compute`) and the watch on the cluster (`watchdog`)."""
