// The bare worker's workflow (bench/bare-worker.ts): the least a Temporal TypeScript workflow can be.
export function trivialWorkflow(): Promise<string> {
  return Promise.resolve('done');
}
