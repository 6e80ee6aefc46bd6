# syntax=docker/dockerfile:1
#
# autowrap admission webhook image.
#   docker build -t ghcr.io/autowrap/autowrap:0.4.0 .
# Multi-arch (one manifest list for linux/amd64 and linux/arm64):
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/autowrap/autowrap:0.4.0 --push .
# Nothing below is specific to an architecture: the base is the Docker Official python image,
# published for both platforms, and both stages run on the target platform (no
# `--platform=$BUILDPLATFORM`), because the virtualenv holds compiled wheels (cryptography,
# PyYAML, orjson, uvloop, aiohttp, pydantic-core) that must match the target. A foreign
# platform's stage runs under QEMU emulation (binfmt) on the build host.
#
# Stage 1 builds wheels for autowrap and every dependency and installs them into a virtualenv;
# stage 2 is the same slim Python base with only that virtualenv copied in: no pip cache, no
# sources, no compilers.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
# Every dependency ships binary wheels for linux/amd64 and linux/arm64 (manylinux, glibc, as
# the Debian-based slim image), so pip picks the wheel of the platform it runs on and no
# compiler is needed here either.
RUN python -m pip wheel --wheel-dir /wheels . \
 && python -m venv /opt/autowrap \
 && /opt/autowrap/bin/pip install --no-index --find-links /wheels autowrap \
 && /opt/autowrap/bin/pip uninstall --yes pip \
 && /opt/autowrap/bin/autowrap --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="autowrap" \
      org.opencontainers.image.description="Admission webhook that wraps Volcano Jobs and Pods into Kueue-queued AppWrappers" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/autowrap/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONFAULTHANDLER=1
COPY --from=builder /opt/autowrap /opt/autowrap
# Same numeric user as the Deployment's runAsUser; numeric so that runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /tmp
# 9443: admission webhook (HTTPS); 8080: Prometheus metrics (HTTP).
EXPOSE 9443 8080
ENTRYPOINT ["autowrap"]
CMD ["serve"]
