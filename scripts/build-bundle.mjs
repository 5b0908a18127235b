#!/usr/bin/env node
// Bundles the built service (dist/src/main.js, from tsc) into dist/bundle/ with esbuild: one
// ES module for the entry point plus one chunk per dynamically imported part (key-value and
// memcached backends, statistics sinks, xDS), so those still load only when the settings use
// them. `bin/ratelimit` runs the bundle when it exists. Run by `make build`.
//
// The command-line tools are bundled too, each into one self-contained file
// (dist/bundle/client.js, dist/bundle/config-check.js, dist/bundle/conformance.js), for the npm package: it ships
// dist/bundle but not dist/src (package.json "files"). No code splitting with the service:
// a tool runs only when its own entry file is the script Node started, which a shared chunk
// could silently break.
//
// Why: loading ~420 separate modules costs module records, resolution and per-file source
// strings on the V8 heap, and the resolver's work at start-up is hot enough for V8 to compile
// optimised code for it; one bundle saves 4–9 MiB of idle RSS (docs/performance.md "Idle
// RSS"). Whitespace-minified only: stack traces keep their names.
//
// Nothing is left outside: OpenTelemetry's SDK and exporters (with @grpc/grpc-js for OTLP/gRPC)
// go into the chunk of src/telemetry/tracing.js, which main.js imports only with
// TRACING_ENABLED, and @opentelemetry/api into the shared chunks. The SDK runs with no
// auto-instrumentation, so it never needs to patch real modules as they load. So the bundle
// needs no node_modules at run time, which keeps the container image to the Node binary and
// dist/ (Containerfile).
import { builtinModules, createRequire } from "node:module";
import {
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from "node:fs";
import { stdout } from "node:process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "bundle");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
// CommonJS dependencies call require() for Node's built-in modules.
const banner = {
  js: 'import { createRequire as __rlsCreateRequire } from "node:module";\nconst require = __rlsCreateRequire(import.meta.url);',
};
// Some dependencies ship ES modules built by rolldown, which load a package lazily through
// `__require("pkg")`, a createRequire() that esbuild cannot follow (the OTLP/gRPC exporter
// loads @grpc/grpc-js so). Left as is, that call loads a second copy from node_modules at run
// time (or fails where there is none, as in the container image), whose classes the bundled
// copy rejects ("Channel credentials must be a ChannelCredentials object"). This plugin turns
// each such call on a package (not a Node built-in) into a static import, so the bundled copy
// serves it; the chunk that holds the caller is lazy anyway.
const builtins = new Set(builtinModules);
const staticRequires = {
  name: "static-lazy-requires",
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/].*\.mjs$/ }, (args) => {
      const source = readFileSync(args.path, "utf8");
      if (!source.includes('__require("')) return undefined;
      const imports = new Map();
      const contents = source.replace(
        /\b__require\("([^"]+)"\)/g,
        (call, specifier) => {
          if (specifier.startsWith("node:") || builtins.has(specifier))
            return call;
          let name = imports.get(specifier);
          if (name === undefined) {
            name = `__rlsStatic${imports.size}`;
            imports.set(specifier, name);
          }
          return name;
        },
      );
      if (imports.size === 0) return undefined;
      const header = [...imports]
        .map(
          ([specifier, name]) =>
            `import * as ${name} from ${JSON.stringify(specifier)};\n`,
        )
        .join("");
      return { contents: header + contents, loader: "js" };
    });
  },
};
// The HTTP front ends (src/server/connect-handler.ts) need two modules of
// @connectrpc/connect-node: the Node request adapter and the compression codecs. Through the
// package's index, esbuild put every module it re-exports into one chunk that the service
// loads at start, and with the client transports came node:http2 and node:https (~5 MiB of
// RSS, docs/performance.md "What start-up loaded without using it"). This plugin hands
// connect-handler those two modules alone; the transports stay in the lazy xDS chunk.
const connectNodeEsm = join(
  root,
  "node_modules",
  "@connectrpc",
  "connect-node",
  "dist",
  "esm",
);
const connectNodeServerParts = {
  name: "connect-node-server-parts",
  setup(b) {
    b.onResolve({ filter: /^@connectrpc\/connect-node$/ }, (args) =>
      args.importer.endsWith(join("server", "connect-handler.js"))
        ? { path: "server-parts", namespace: "connect-node" }
        : undefined,
    );
    b.onLoad({ filter: /.*/, namespace: "connect-node" }, () => ({
      contents: [
        `export { compressionBrotli, compressionGzip } from ${JSON.stringify(join(connectNodeEsm, "compression.js"))};`,
        `export { universalRequestFromNodeRequest, universalResponseToNodeResponse } from ${JSON.stringify(join(connectNodeEsm, "node-universal-handler.js"))};`,
      ].join("\n"),
      resolveDir: connectNodeEsm,
      loader: "js",
    }));
  },
};
// `import { createServer } from "node:http"` in an ES module makes Node build node:http's
// whole module namespace, which reads its lazy `WebSocket`, `CloseEvent` and `MessageEvent`
// getters: that loads Node's bundled undici, and with it node:http2, node:tls and crypto. A
// process with an http server listening measured 45.8 MiB of RSS when it took node:http
// through require(), 58.0 MiB through import (docs/performance.md "What start-up loaded
// without using it"). This plugin serves node:http to the bundle through require(),
// re-exporting its plain (non-getter) properties, so undici loads only if something uses
// fetch or WebSocket.
const http = createRequire(import.meta.url)("node:http");
const httpDataExports = Object.keys(http).filter(
  (k) => !("get" in Object.getOwnPropertyDescriptor(http, k)),
);
const httpThroughRequire = {
  name: "http-through-require",
  setup(b) {
    b.onResolve({ filter: /^(node:)?http$/ }, (args) =>
      args.namespace === "http-through-require"
        ? { path: "node:http", external: true }
        : { path: "node:http", namespace: "http-through-require" },
    );
    b.onLoad({ filter: /.*/, namespace: "http-through-require" }, () => ({
      contents: [
        'const http = require("node:http");',
        "export default http;",
        ...httpDataExports.map((k) => `export const ${k} = http.${k};`),
      ].join("\n"),
      loader: "js",
    }));
  },
};
// ioredis requires node:tls at the top of its two connectors and calls only `tls.connect`,
// when a connection is configured with TLS. Given that call lazily, a kv service without TLS
// does not load node:tls (~3 MiB of RSS; src/util/lazy-tls.ts does the same for our code).
const ioredisLazyTls = {
  name: "ioredis-lazy-tls",
  setup(b) {
    b.onLoad(
      { filter: /[\\/]ioredis[\\/]built[\\/]connectors[\\/].*\.js$/ },
      (args) => {
        const source = readFileSync(args.path, "utf8");
        const eager = 'const tls_1 = require("tls");';
        if (!source.includes(eager))
          return source.includes('require("tls")')
            ? {
                warnings: [
                  {
                    text: "ioredis-lazy-tls: node:tls is required in a new way",
                  },
                ],
              }
            : undefined;
        const lazy =
          'const tls_1 = { connect: (...args) => require("tls").connect(...args) };';
        return { contents: source.replace(eager, lazy), loader: "js" };
      },
    );
  },
};
await build({
  entryPoints: { main: join(root, "dist", "src", "main.js") },
  outdir: out,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node22",
  banner,
  plugins: [
    staticRequires,
    connectNodeServerParts,
    httpThroughRequire,
    ioredisLazyTls,
  ],
  legalComments: "none",
  // Whitespace and comments out (names and syntax kept): V8 keeps every loaded module's source
  // on its heap, and the comments tsc leaves in make main.js a two-byte string (`µ`, `≤`, `…`):
  // idle heapUsed -1.8 MiB (memory) / -3.2 MiB (kv), RSS -3 to -4 MiB (docs/performance.md
  // "Round 4: memory"). The linked source map gives readable stack traces with
  // NODE_OPTIONS=--enable-source-maps; without that flag Node does not read it.
  minifyWhitespace: true,
  sourcemap: "linked",
  logLevel: "warning",
});
const serviceFiles = readdirSync(out).filter((f) => f.endsWith(".js"));
const serviceBytes = serviceFiles.reduce(
  (sum, f) => sum + statSync(join(out, f)).size,
  0,
);
stdout.write(
  `service bundled: dist/bundle/main.js and ${serviceFiles.length - 1} chunks, ${serviceBytes} B\n`,
);
await build({
  entryPoints: {
    client: join(root, "dist", "src", "cli", "client.js"),
    "config-check": join(root, "dist", "src", "cli", "config-check.js"),
    conformance: join(root, "dist", "src", "conformance", "main.js"),
  },
  outdir: out,
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node22",
  banner,
  legalComments: "none",
  logLevel: "warning",
});
const size = (name) => statSync(join(out, name)).size;
stdout.write(
  `tools bundled: dist/bundle/client.js ${size("client.js")} B, dist/bundle/config-check.js ${size("config-check.js")} B, dist/bundle/conformance.js ${size("conformance.js")} B\n`,
);
