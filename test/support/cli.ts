// The operator CLI as operators run it: the compiled package bin (dist/cli/main.js, which `npm test` builds first)
// as a child process, its exit code and both outputs.
import { execFile } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `whalehunt-consumer <args>` with `env` over this process's environment; never rejects (a failure is its exit
 * code).
 */
export function runCli(env: Record<string, string>, ...args: string[]): Promise<CliResult> {
  return new Promise((resolveRun) => {
    execFile(
      process.execPath,
      [join(repoRoot, 'dist/cli/main.js'), ...args],
      { cwd: repoRoot, env: { ...process.env, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolveRun({ code, stdout, stderr });
      },
    );
  });
}
