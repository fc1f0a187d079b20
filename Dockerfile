# The image every pod of cluster.yaml runs: Python with dedup (and its Dask) installed.
FROM python:3.11-slim
WORKDIR /opt/dedup
COPY pyproject.toml README.md ./
COPY dedup ./dedup
RUN pip install --no-cache-dir . s3fs gcsfs \
    && python -c "import dedup; dedup.signatures(['warm the numba cache'])"
