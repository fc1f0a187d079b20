"""The Dask job: the plan checked before any cluster starts (`plan`), the stages run top to bottom
(`pipeline`, `stages`), the routes between partitions (`graphs`) and the watch on the cluster
(`watchdog`)."""
