# syntax=docker/dockerfile:1
# The gang-scheduler image: the scheduler (`run`, the default) and the node agent
# (`node-agent`), one image for both. Two stages: the first builds the project's wheel
# from the packaging inputs only; the second installs that wheel (with the `agent` extra,
# NVIDIA's NVML bindings) and the packages requirements.lock pins into a slim Python and
# nothing else: no source tree, no tests, no build tools. Runs as a numeric non-root user, so `runAsNonRoot` can verify it.
#
#   docker build -t ghcr.io/gang-scheduler/gang-scheduler:0.1.0 .
#   scripts/build-image.sh     # no daemon: buildah, the base built from Debian packages
#
# Needs BuildKit (the default builder of current Docker) or buildah for the bind mount
# below. The base is named by tag, NOT pinned by digest: no container registry is
# reachable where this project is built and tested, so no digest of python:3.11-slim
# could be verified here, and an unverified digest would be worse than none. Pin it
# where you build: --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<the digest you
# verified> (docs/operator-guide.md, "Building the image"). scripts/build-image.sh
# passes a base it makes from Debian's packages instead (Python 3.11 and pip).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md LICENSE requirements.lock ./
COPY cache/ cache/
COPY policies/ policies/
COPY scheduler/ scheduler/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . && cp requirements.lock /wheels/

FROM ${PYTHON_IMAGE}
# The project's version (pyproject.toml; a test keeps them equal).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gang-scheduler" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.description="Kubernetes gang scheduler for ML learning tasks: all-or-nothing gangs, fractional GPUs, GPU topology" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The wheel and the lock file are mounted for this step only: installed, never copied
# into a layer. Every package is the version requirements.lock pins (make lock), none
# resolved at build time (--no-deps), so two builds install the same; pip check fails
# the build if the lock no longer satisfies the project's requirements.
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-deps -r /wheels/requirements.lock \
        "$(ls /wheels/gang_scheduler-*.whl)[agent]" \
    && pip check
USER 65532:65532
ENTRYPOINT ["gang-scheduler"]
CMD ["run"]
