# A StarForge executor service (`starforge-executor --kind K`), from the wheels `make images` puts
# in the build context (see control.Dockerfile). One image for every kind; CMD picks it (local).
#
#   docker build --network=none --build-arg BASE=python:3.11-slim-bookworm \
#       -f deploy/images/executor.Dockerfile -t starforge-executor build/images/context
#
# The local kind's docker runtime drives the host's engine through its socket: mount it, add the
# socket's group (`group_add`), and mount the executor's state_dir at the same path on both sides
# (the engine resolves the attempts' bind mounts on the host). See docs/deploy.md.
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
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/starforge --shell /usr/sbin/nologin starforge \
 && mkdir -p /var/lib/starforge/executor /etc/starforge \
 && chown -R starforge:starforge /var/lib/starforge
ENV PATH=/opt/starforge/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    STARFORGE_HEALTHCHECK_ADDRESS=127.0.0.1:7071
USER 10001:10001
WORKDIR /var/lib/starforge
EXPOSE 7071
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/opt/starforge/bin/python3", "-m", "common.healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/starforge/bin/starforge-executor"]
CMD ["--kind", "local", "--config", "/etc/starforge/executor.yaml"]
