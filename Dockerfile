# The worker image of docker-compose.yml (its consumer-start service runs the CLI from it too). TypeScript runs
# through tsx's loader, as in development: the image holds the sources and the production dependencies only.
# Node 22 LTS: package.json "engines" allows 20.10–22, and 20 is past its end of life.
FROM node:22.23.2-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production

# Dependencies first, from the lockfile alone, so a source change reuses this layer.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# .dockerignore keeps node_modules, .data and .git of the build context out.
COPY . .

USER node
# node itself (not npx or the tsx CLI, which add a parent process) receives compose's SIGTERM, so the
# worker's graceful shutdown runs: leases stop at a checkpoint boundary.
CMD ["node", "--import", "tsx", "worker/main.ts"]
