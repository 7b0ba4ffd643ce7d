# The StarForge control plane (`starforge-control`), from the wheels `make images` puts in the
# build context (wheels/: dist/starforge-<version>-py3-none-any.whl and every dependency, cp311).
#
#   docker build --network=none --build-arg BASE=python:3.11-slim-bookworm \
#       -f deploy/images/control.Dockerfile -t starforge-control build/images/context
#
# BASE: any Debian-like image with python3 3.11 on PATH (python3 -m venv must work; pip is not
# needed: it comes from the wheelhouse). The install stage is the same in every StarForge
# Dockerfile, so the second and third image reuse its cached layers.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS install
COPY wheels/ /tmp/wheels/
RUN python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), "BASE needs python3 3.11, has " + sys.version' \
 && python3 -m venv --without-pip /opt/starforge \
 && /opt/starforge/bin/python3 "$(ls /tmp/wheels/pip-*.whl)/pip" install --no-index --find-links /tmp/wheels \
      --no-cache-dir --disable-pip-version-check --no-warn-script-location starforge \
 && /opt/starforge/bin/python3 -c 'import control.main, executor_svc.main, forgelet.main, common.healthcheck'

FROM ${BASE}
COPY --from=install /opt/starforge /opt/starforge
# A user of its own (no login, no password); its state and the shared blob directory are volumes.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/starforge --shell /usr/sbin/nologin starforge \
 && mkdir -p /var/lib/starforge/console /var/lib/starforge/blobs /etc/starforge \
 && chown -R starforge:starforge /var/lib/starforge
ENV PATH=/opt/starforge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    STARFORGE_HEALTHCHECK_ADDRESS=127.0.0.1:7070
USER 10001:10001
WORKDIR /var/lib/starforge
VOLUME ["/var/lib/starforge/console", "/var/lib/starforge/blobs"]
# gRPC (sf, capsules, executors) and HTTP (/healthz, /metrics, blobs, the UI)
EXPOSE 7070 8081
# grpc.health.v1 on the gRPC port (STARFORGE_HEALTHCHECK_ADDRESS; _CA_FILE, _SERVER_NAME for TLS)
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/opt/starforge/bin/python3", "-m", "common.healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/starforge/bin/starforge-control"]
CMD ["--config", "/etc/starforge/control.yaml"]
