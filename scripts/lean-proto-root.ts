// What the CLI bundle (scripts/build.ts) carries of @temporalio/proto's reflected root: every namespace but those
// no bundled command uses, built from one JSON string.
import { readFileSync } from 'node:fs';
import type { Plugin } from 'esbuild';

/**
 * Namespaces of @temporalio/proto's reflected root that no bundled command uses: the worker's core interface (run
 * and backfill load the unbundled SDK), Temporal Cloud's operations API and its OpenAPI annotations. Each status
 * call built them all (what leaving them out saved: README, Running in production).
 */
export const CLI_UNUSED_PROTO_NAMESPACES: readonly (readonly string[])[] = [
  ['coresdk'],
  ['temporal', 'api', 'cloud'],
  ['grpc', 'gateway'],
];
const PROTO_JSON_MODULE = /[\\/]@temporalio[\\/]proto[\\/]protos[\\/]json-module\.js$/;

/** An esbuild plugin: @temporalio/proto's json-module.js loads without CLI_UNUSED_PROTO_NAMESPACES. */
export function leanProtoRoot(): Plugin {
  return {
    name: 'lean-proto-root',
    setup(build) {
      build.onLoad({ filter: PROTO_JSON_MODULE }, (args) => ({
        contents: withoutUnusedProtoNamespaces(readFileSync(args.path, 'utf8')),
        loader: 'js',
      }));
    },
  };
}

interface ProtoNamespaceJson {
  nested?: Record<string, ProtoNamespaceJson>;
}

/**
 * pbjs's json-module is `$root.addJSON(<the descriptor as JSON>);` and `module.exports = $root;`. The pruned
 * descriptor goes in as a JSON.parse of a string, which V8 reads faster than the same object literal. A layout
 * or a namespace this does not find fails the build: an SDK upgrade that moved them must be looked at.
 */
export function withoutUnusedProtoNamespaces(source: string): string {
  const call = '.addJSON(';
  const start = source.indexOf(call) + call.length;
  const end = source.lastIndexOf('});') + 1;
  if (start < call.length || end <= start) throw new Error('build: @temporalio/proto json-module.js has a new layout');
  const root = JSON.parse(source.slice(start, end)) as Record<string, ProtoNamespaceJson>;
  for (const path of CLI_UNUSED_PROTO_NAMESPACES) {
    const name = path.at(-1)!;
    let parent: Record<string, ProtoNamespaceJson> | undefined = root;
    for (const step of path.slice(0, -1)) parent = parent?.[step]?.nested;
    if (parent?.[name] === undefined) throw new Error(`build: @temporalio/proto has no namespace ${path.join('.')}`);
    delete parent[name];
  }
  return `${source.slice(0, start)}JSON.parse(${JSON.stringify(JSON.stringify(root))})${source.slice(end)}`;
}
