# The specgate router: `specgate router --config /etc/specgate/config.yaml` on port 8000.
# Build from the repository root:  docker build -f docker/router.Dockerfile -t specgate/router:0.1.0 .
# Slim (no torch, no SGLang: the router only tokenizes), non-root, with a HEALTHCHECK on /health.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/tmp/hf

WORKDIR /opt/specgate
COPY pyproject.toml README.md ./
COPY router ./router
COPY serving ./serving
COPY drafters ./drafters
COPY loadtests ./loadtests

# The README/Makefile install step for the project itself (`pip install -e .`), without the
# dev extras and torch the test suite needs.
RUN pip install -e . \
    && groupadd --system --gid 10001 specgate \
    && useradd --system --uid 10001 --gid specgate --home-dir /nonexistent --shell /usr/sbin/nologin specgate

USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["specgate"]
CMD ["router", "--config", "/etc/specgate/config.yaml"]
