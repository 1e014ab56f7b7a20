# One image for every fak service; compose.yaml and the Kubernetes manifests pick the service by command.
# Node.js (node, npm, npx) comes along for the gateway's stdio MCP servers (deploy/mcp/servers.yaml).
FROM node:22.12.0-bookworm-slim AS node

FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FAK_HOST=0.0.0.0 \
    FAK_METRICS_HOST=0.0.0.0 \
    FAK_CACHE_DIR=/var/cache/fak \
    NUMBA_CACHE_DIR=/var/cache/fak/numba

COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx

RUN useradd --system --uid 10001 --create-home --home-dir /home/fak fak \
    && mkdir -p /var/cache/fak \
    && chown fak /var/cache/fak

WORKDIR /opt/fak
COPY pyproject.toml setup.py README.md ./
COPY libs ./libs
COPY services ./services
RUN pip install --no-cache-dir .

USER fak
EXPOSE 8080 9100
ENTRYPOINT ["fak"]
CMD ["serve", "gateway"]
