"""What one Dask task computes: pure pandas and numpy functions of one partition (features, band
rows, pairs, decisions, large-star/small-star steps), each testable without a cluster."""
