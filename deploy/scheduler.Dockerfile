# The scheduler image: `coach scheduler` (deploy/scheduler-deployment.yaml) and nothing that trains. It installs
# Coach without the `run` extra, so it holds no MXNet, numpy or scipy, and none of the Nuclio functions' code.
# Built from the repository root (it cannot be built on the machines this project is developed on, which have no
# Docker daemon):
#   docker build -f deploy/scheduler.Dockerfile -t REGISTRY/coach-scheduler:TAG .
#   docker push REGISTRY/coach-scheduler:TAG
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/coach
COPY pyproject.toml README.md ./
COPY coach ./coach
COPY scheduler_fork ./scheduler_fork

# A plain (not editable) install of the base dependencies only. The numeric user matches runAsUser in the
# Deployment, so runAsNonRoot can check it.
RUN pip install . \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin coach

USER 10001:10001
CMD ["coach", "scheduler", "--help"]
