# syntax=docker/dockerfile:1
# agui-gateway as a container image: `agui-gateway run`, configured by
# AGUI_GATEWAY_* environment variables (README, "Settings").
#
#   docker build -t agui-gateway .
#   docker run --rm -e AGUI_GATEWAY_BOOTSTRAP_SERVERS=broker:9092 -p 9464:9464 agui-gateway
#
# Stage 1 builds the project's wheel and the wheels of its dependencies;
# stage 2 installs them, and nothing else, into a slim image that runs as a
# non-root user. docker-compose.yml builds and runs this image.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY schemas/ schemas/
COPY gateway/ gateway/
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 \
    AGUI_GATEWAY_HTTP_HOST=0.0.0.0 AGUI_GATEWAY_HTTP_PORT=9464
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels agui-gateway \
    && useradd --system --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin agui
USER agui
WORKDIR /tmp
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('AGUI_GATEWAY_HTTP_PORT', '9464'), timeout=3)"]
ENTRYPOINT ["agui-gateway", "run"]
