# The CPU development pool: real SGLang 0.5.23 on its CPU backend with specgate's sgl_kernel
# stand-in (serving/cpu), for clusters and laptops without GPUs (deploy/overlays/cpu-dev).
# Build from the repository root:  docker build -f docker/cpu-pool.Dockerfile -t specgate/cpu-pool:0.1.0 .
# Run: python3 -m sglang.launch_server ... --device cpu (the chart and the overlay give the flags).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/specgate/.venv \
    PATH=/opt/specgate/.venv/bin:$PATH \
    SGLANG_USE_CPU_ENGINE=1 \
    HOME=/home/specgate

WORKDIR /opt/specgate
COPY pyproject.toml README.md Makefile ./
COPY router ./router
COPY serving ./serving
COPY drafters ./drafters
COPY loadtests ./loadtests

# Exactly the Makefile's `venv` and `cpu-engine` steps (what `make cpu-engine` runs).
RUN python3 -m venv /opt/specgate/.venv \
    && /opt/specgate/.venv/bin/pip install -q --upgrade pip \
    && /opt/specgate/.venv/bin/pip install -q -e '.[dev]' torch==2.13.0
RUN bash serving/cpu/install.sh /opt/specgate/.venv

RUN groupadd --system --gid 10001 specgate \
    && useradd --system --uid 10001 --gid specgate --create-home --home-dir /home/specgate --shell /usr/sbin/nologin specgate
USER 10001:10001
EXPOSE 30000
# Loading the model and the warm-up generation take a while on a CPU.
HEALTHCHECK --interval=15s --timeout=10s --start-period=300s --retries=3 \
  CMD ["python3", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=8).status == 200 else 1)"]
CMD ["python3", "-m", "sglang.launch_server", "--help"]
