# The worker image of docker-compose.yml (its consumer-start service runs the CLI from it too), in two stages:
# the build stage installs every dependency and runs `npm run build` (tsc into dist/, the prebuilt workflow
# bundle and the one-file CLI); the image itself holds dist/, the production dependencies and the consumer-start
# script, no sources, no TypeScript tooling. Node 24, the current LTS (package.json "engines": 20.19+, 22.13+, 24).
FROM node:24.22.3-bookworm-slim AS build

WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
# .dockerignore keeps node_modules, dist, .data and .git of the build context out.
COPY . .
RUN npm run build

FROM node:24.22.3-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production

# Dependencies first, from the lockfile alone, so a source change reuses this layer.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY --from=build /app/dist ./dist
COPY deploy/start-consumer.sh ./deploy/start-consumer.sh

USER node
# node itself (not npm or npx, which add a parent process) receives compose's SIGTERM, so the worker's graceful
# shutdown runs: leases stop at a checkpoint boundary. The worker loads dist/workflow-bundle.js: no webpack run
# at start. Its Node flags are worker/node-flags.ts's (why: there).
CMD ["node", "--max-semi-space-size=16", "dist/worker/main.js"]
