// One linter for the whole tree. Type-aware rules catch floating promises everywhere; imports run down the
// rooms' layers only; workflow and domain files may not import Node built-ins or I/O libraries (workflows run
// in Temporal's deterministic sandbox, and import the domain rules).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const nodeBuiltins = [
  'assert',
  'async_hooks',
  'buffer',
  'child_process',
  'cluster',
  'crypto',
  'dgram',
  'dns',
  'events',
  'fs',
  'fs/promises',
  'http',
  'http2',
  'https',
  'net',
  'os',
  'path',
  'perf_hooks',
  'process',
  'readline',
  'stream',
  'timers',
  'tls',
  'url',
  'util',
  'v8',
  'vm',
  'worker_threads',
  'zlib',
];

// The rooms in layers, lowest first: an import runs downward or stays in its room, never upward. bench/,
// scripts/ and test/ may import anything. The workflows' room is narrower still (below).
/** @type {Record<string, string[]>} */
const LAYERS = {
  protocol: [],
  domain: ['protocol'],
  db: ['protocol', 'domain'],
  simulator: ['protocol'],
  activities: ['protocol', 'domain', 'db', 'simulator'],
  workflows: ['protocol', 'domain', 'activities'],
  worker: ['protocol', 'domain', 'db', 'simulator', 'activities', 'workflows'],
  cli: ['protocol', 'domain', 'db', 'simulator', 'activities', 'workflows', 'worker'],
};
const ROOMS = [...Object.keys(LAYERS), 'bench', 'scripts', 'test'];

/**
 * The no-restricted-imports pattern that refuses every room `room` may not import.
 * @param {string} room
 */
function upwardImports(room) {
  const below = LAYERS[room] ?? [];
  return {
    group: ROOMS.filter((other) => other !== room && !below.includes(other)).map((other) => `../${other}/*`),
    message: `${room}/ may import only ${[...below, room].join(', ')}: imports run down the layers (eslint.config.js).`,
  };
}

/** Why workflow code checks its input by hand (workflows/validation.ts, protocol/codec-filter.ts). */
const ZOD_IN_WORKFLOWS =
  'zod (codec.ts loads it) in the workflow bundle costs the worker ~16 MiB of resident memory: import types only.';

/**
 * Node built-ins and I/O libraries: refused where code must stay deterministic and free of I/O.
 * @param {string} why
 */
function noNodeOrIo(why) {
  return [
    ...nodeBuiltins.flatMap((m) => [
      { name: m, message: `${why}: no Node built-ins.` },
      { name: `node:${m}`, message: `${why}: no Node built-ins.` },
    ]),
    { name: 'pg', message: `${why}: no I/O.` },
    { name: 'ws', message: `${why}: no I/O.` },
  ];
}

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', 'db/migrations/**', 'coverage/**', 'dist/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ['*.js'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true, allowBoolean: true }],
      '@typescript-eslint/consistent-type-imports': 'error',
      // Prettier wraps code at 120; this holds comments to the same width (it cannot wrap string literals).
      'max-len': [
        'error',
        { code: 120, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreUrls: true, ignoreRegExpLiterals: true },
      ],
    },
  },
  {
    // Plain JS files (the config files) run on Node.
    files: ['**/*.js'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', URL: 'readonly' } },
  },
  // One no-restricted-imports per room: a later config's options would replace an earlier one's, not add to them.
  ...['protocol', 'db', 'simulator', 'activities', 'worker', 'cli'].map((room) => ({
    files: [`${room}/**/*.ts`],
    rules: { 'no-restricted-imports': ['error', { patterns: [upwardImports(room)] }] },
  })),
  {
    // The domain rules are imported by workflow code too: they stay deterministic and free of I/O.
    files: ['domain/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { paths: noNodeOrIo('Domain code is pure'), patterns: [upwardImports('domain')] },
      ],
    },
  },
  {
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [...noNodeOrIo('Workflow code is deterministic'), { name: 'zod', message: ZOD_IN_WORKFLOWS }],
          patterns: [
            upwardImports('workflows'),
            { group: ['../protocol/codec.js'], message: ZOD_IN_WORKFLOWS, allowTypeImports: true },
            {
              group: ['../activities/*', '!../activities/types*'],
              message: 'Import activities as types only (from activities/types).',
              allowTypeImports: true,
            },
          ],
        },
      ],
      'no-restricted-globals': ['error', { name: 'setTimeout', message: 'Use sleep() from @temporalio/workflow.' }],
    },
  },
  {
    // A production function that outgrows a screen and a half holds more than one job: split it by job.
    files: ['{protocol,domain,db,simulator,activities,workflows,worker,cli}/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 120, IIFEs: true }] },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/unbound-method': 'off',
    },
  },
);
