# Every test server's image: the locally built Debian base (`scripts/images` passes
# BASE), the server's Debian packages (containers/SERVER/packages) and its start script
# (containers/SERVER/run), built with containers/SERVER as the context.
ARG BASE
FROM ${BASE}
COPY packages /tmp/packages
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/packages
COPY run /usr/local/bin/run-server
ENTRYPOINT ["/bin/sh", "/usr/local/bin/run-server"]
