# The worker image used by docker-compose.yml. TypeScript runs through tsx, as in development, so the
# image holds the sources and the production dependencies only.
FROM node:20-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production

COPY package.json package-lock.json ./
# npm 11 runs only the install scripts allowed in package.json "allowScripts".
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY . .

USER node
CMD ["npx", "tsx", "worker/main.ts"]
