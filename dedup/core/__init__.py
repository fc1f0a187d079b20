"""The rule itself, exact to docs/contract.md: words and shingles, hashes, MinHash signatures, LSH
bands, union-find and the 13-gram decontamination rule, in numpy and numba (`_kernels`). Nothing
here knows about Dask, partitions or files."""
