#!/usr/bin/env node
// The package's executable (`whalehunt-consumer <command>`): the TypeScript CLI run through tsx's loader,
// so there is no build step. `npm run cli -- <command>` does the same.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('./main.ts');
process.exit(await main(process.argv.slice(2)));
