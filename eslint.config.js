// One linter for the whole tree. Type-aware rules catch floating promises everywhere; workflow files
// additionally may not import Node built-ins or I/O libraries (they run in Temporal's deterministic sandbox).
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

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', 'db/migrations/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ['*.js', 'cli/*.js'] },
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
    // Plain JS entry points (config files, the CLI shim) run on Node.
    files: ['**/*.js'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', URL: 'readonly' } },
  },
  {
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            ...nodeBuiltins.flatMap((m) => [
              { name: m, message: 'Workflow code is deterministic: no Node built-ins.' },
              { name: `node:${m}`, message: 'Workflow code is deterministic: no Node built-ins.' },
            ]),
            { name: 'pg', message: 'Workflow code does no I/O.' },
            { name: 'ws', message: 'Workflow code does no I/O.' },
          ],
          patterns: [
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
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/unbound-method': 'off',
    },
  },
);
