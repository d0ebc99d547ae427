# The controller image: the whole `coach` command with its `run` extra, for `coach run --platform nuclio` (and
# `coach serve`) in a pod. `coach scheduler` has a smaller image of its own (deploy/scheduler.Dockerfile).
# Built from the repository root (it cannot be built on the machines this project is developed on, which have no
# Docker daemon):
#   docker build -f deploy/controller.Dockerfile -t REGISTRY/coach-controller:TAG .
#   docker push REGISTRY/coach-controller:TAG
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/coach
COPY pyproject.toml README.md ./
COPY coach ./coach
COPY coach_functions ./coach_functions
COPY scheduler_fork ./scheduler_fork

# A plain (not editable) install: the packages land in site-packages and the sources here are not needed at
# run time. The numeric user matches runAsUser in the Deployment, so runAsNonRoot can check it.
RUN pip install '.[run]' \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin coach

USER 10001:10001
CMD ["coach", "--help"]
