// Type-aware flat ESLint config (house style §13): strict async rules, import boundaries.
import js from "@eslint/js";
import prettier from "eslint-config-prettier";
import n from "eslint-plugin-n";
import { defineConfig } from "eslint/config";
import tseslint from "typescript-eslint";

/** Builds one import-boundary block for a src/ folder. */
function boundary(files, groups, message) {
  return {
    files,
    rules: {
      "no-restricted-imports": [
        "error",
        // One gitignore-style list, so a later "!pattern" re-allows what an earlier one forbids.
        { patterns: [{ group: groups, message }] },
      ],
    },
  };
}

export default defineConfig(
  {
    ignores: [
      "gen/**",
      "dist/**",
      "coverage/**",
      "proto/**",
      "node_modules/**",
      ".tools/**",
      ".bench/**",
    ],
  },
  js.configs.recommended,
  tseslint.configs.strictTypeChecked,
  tseslint.configs.stylisticTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    plugins: { n },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/switch-exhaustiveness-check": "error",
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_" },
      ],
      "@typescript-eslint/restrict-template-expressions": [
        "error",
        { allowNumber: true },
      ],
      "no-console": "error",
      "no-restricted-syntax": [
        "error",
        "ExportAllDeclaration",
        "TSEnumDeclaration",
        "TSModuleDeclaration",
      ],
      "n/prefer-node-protocol": "error",
      "n/no-process-exit": "error",
      "no-restricted-properties": [
        "error",
        {
          object: "process",
          property: "env",
          message: "read settings in src/main.ts only",
        },
      ],
    },
  },
  {
    // One idea per file (house style §3).
    files: ["src/**/*.ts"],
    rules: { "max-lines": ["error", { max: 900 }] },
  },
  {
    files: ["**/*.js", "**/*.mjs"],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    files: ["src/main.ts", "src/cli/**/*.ts", "bench/**/*.ts", "test/**/*.ts"],
    rules: { "n/no-process-exit": "off", "no-restricted-properties": "off" },
  },
  {
    // The decision path indexes parallel arrays of known length (descriptors, limits, hits
    // addends, statuses) in plain for-loops; with noUncheckedIndexedAccess that needs `!`.
    files: [
      "src/limiter/**",
      "src/backends/**",
      "src/service/**",
      "src/config/**",
      "src/explain/**",
    ],
    rules: { "@typescript-eslint/no-non-null-assertion": "off" },
  },
  {
    files: ["test/**/*.ts", "bench/**/*.ts"],
    rules: {
      "@typescript-eslint/no-non-null-assertion": "off",
      "no-console": "off",
    },
  },
  boundary(
    ["src/util/**"],
    [
      "**/proto*",
      "**/settings/**",
      "**/config/**",
      "**/limiter/**",
      "**/backends/**",
      "**/service/**",
      "**/server/**",
      "**/provider/**",
      "**/stats/**",
      "**/health/**",
      "**/telemetry/**",
      "**/app/**",
    ],
    "util/ imports nothing from src/",
  ),
  boundary(
    ["src/health/**", "src/stats/**", "src/settings/**"],
    [
      "**/proto*",
      "**/config/**",
      "**/limiter/**",
      "**/backends/**",
      "**/service/**",
      "**/server/**",
      "**/provider/**",
      "**/app/**",
      "../../gen/**",
    ],
    "health/, stats/, settings/ may import util/ only",
  ),
  boundary(
    ["src/config/**"],
    [
      "**/limiter/**",
      "**/backends/**",
      "**/service/**",
      "**/server/**",
      "**/provider/**",
      "**/settings/**",
      "**/app/**",
      "**/explain/**",
      "**/health/**",
      "**/telemetry/**",
      "**/http2/**",
      "**/cli/**",
      "../../gen/**",
    ],
    "config/ may import proto, stats, util",
  ),
  boundary(
    ["src/limiter/**"],
    [
      "**/backends/**",
      "**/service/**",
      "**/server/**",
      "**/provider/**",
      "**/settings/**",
      "**/app/**",
      "../../gen/**",
    ],
    "limiter/ may import proto, config, stats, util",
  ),
  // One block per backend (a later block for the same files replaces an earlier one's rule).
  ...["memory", "kv", "mc"].map((name) =>
    boundary(
      [`src/backends/${name}/**`],
      [
        "**/proto*",
        "**/config/**",
        "**/service/**",
        "**/server/**",
        "**/explain/**",
        "**/http2/**",
        "**/provider/**",
        "**/settings/**",
        "**/app/**",
        "**/limiter/*",
        "!**/limiter/counter-backend.js",
        "!**/limiter/backend-error.js",
        "!**/limiter/cache-key-error.js",
        "!**/limiter/gcra.js",
        "!**/limiter/gcra-scripts.js",
        "../../../gen/**",
        ...["memory", "kv", "mc"]
          .filter((other) => other !== name)
          .map((other) => `**/${other}/**`),
        // Redis is spoken only in backends/kv/ (house style §4).
        ...(name === "kv" ? [] : ["ioredis"]),
      ],
      "backends/ may import stats, health, util and, of limiter/, counter-backend.ts, the error files and the token-bucket maths (gcra.ts, gcra-scripts.ts) only (they do I/O, the pipeline decides); backends never import each other",
    ),
  ),
  boundary(
    ["src/provider/**"],
    [
      "**/limiter/**",
      "**/backends/**",
      "**/service/**",
      "**/server/**",
      "**/settings/**",
      "**/app/**",
      "../../gen/**",
      "../../../gen/**",
    ],
    "provider/ may import proto, config, stats, health, util",
  ),
  boundary(
    ["src/service/**"],
    [
      "**/backends/**",
      "**/provider/**",
      "**/server/**",
      "**/settings/**",
      "**/app/**",
      "**/explain/**",
      "**/http2/**",
      "**/limiter/*",
      "!**/limiter/rate-limit-cache.js",
      "!**/limiter/decision-rules.js",
      "!**/limiter/decision-hooks.js",
      "!**/limiter/hits-addend.js",
      "!**/limiter/backend-error.js",
      "!**/limiter/cache-key-error.js",
      "../../gen/**",
    ],
    "service/ never imports backends/provider/server/settings/explain; of limiter/ only the pipeline's interface, the decision rules and hooks, the hits addend and the errors",
  ),
  boundary(
    ["src/explain/**"],
    [
      "**/backends/**",
      "**/provider/**",
      "**/settings/**",
      "**/app/**",
      "**/http2/**",
      "**/cli/**",
      "../../gen/**",
      "**/server/**",
      "!**/server/routes.js",
      "!**/server/read-body.js",
      "**/limiter/*",
      "!**/limiter/rate-limit-cache.js",
      "!**/limiter/pipeline.js",
      "!**/limiter/decision-rules.js",
      "!**/limiter/decision-hooks.js",
      "!**/limiter/counter-decision.js",
      "!**/limiter/hits-addend.js",
      "!**/limiter/window.js",
      "!**/limiter/gcra.js",
      "!**/limiter/backend-error.js",
      "!**/limiter/cache-key-error.js",
    ],
    "explain/ may import what service/ may, plus service/ and server/'s handler contract and the token-bucket arithmetic (gcra.ts); it reads counters only through the decision pipeline",
  ),
  boundary(
    ["src/rlqs/**"],
    [
      "**/backends/**",
      "**/provider/**",
      "**/settings/**",
      "**/app/**",
      "**/http2/**",
      "**/cli/**",
      "**/server/**",
      "**/explain/**",
      "**/service/**",
      "**/limiter/**",
      "../../gen/**",
      "ioredis",
    ],
    "rlqs/ (the rate limit quota service) reads the rules through config/ (the view and getLimit) and counts in stats/; it decides nothing through the limiter, backends or server; its kv ledger speaks Redis through the LedgerStorage app/ gives it (backends/kv/)",
  ),
  boundary(
    ["src/http2/**"],
    [
      "../**",
      "@*/**",
      "ioredis",
      "yaml",
      "chokidar",
      "lru-cache",
      "hot-shots",
      "prom-client",
    ],
    "http2/ is a leaf library: it imports nothing from src/ outside it (node: built-ins and pino types only)",
  ),
  boundary(
    ["src/server/*.ts"],
    [
      "**/backends/**",
      "**/provider/**",
      "**/settings/**",
      "**/app/**",
      "**/limiter/**",
      "**/http2/**",
      "**/explain/**",
      "../../gen/**",
    ],
    "server/ never imports backends/provider/settings/limiter/explain; only server/grpc/ uses http2/",
  ),
  boundary(
    ["src/server/grpc/**"],
    [
      "**/backends/**",
      "**/provider/**",
      "**/settings/**",
      "**/app/**",
      "**/limiter/**",
      "**/explain/**",
      "../../../gen/**",
    ],
    "server/grpc/ may import proto, service, config, health, stats, util, http2/ and server/",
  ),
  boundary(
    ["src/console/**"],
    [
      "**/app/**",
      "**/config/**",
      "**/limiter/**",
      "**/backends/**",
      "**/service/**",
      "**/server/**",
      "**/provider/**",
      "**/settings/**",
      "**/stats/**",
      "**/health/**",
      "**/telemetry/**",
      "**/util/**",
      "../../gen/**",
      "node:*",
      "@connectrpc/connect-node",
    ],
    "console/ is browser code: it may import proto and @connectrpc/connect(-web) only",
  ),
  boundary(
    ["src/admin/**", "src/overrides/**", "src/offenders/**", "src/canary/**"],
    [
      "**/backends/**",
      "**/provider/**",
      "**/server/**",
      "**/settings/**",
      "**/app/**",
      "**/http2/**",
      "**/explain/**",
      "**/cli/**",
      "**/console/**",
      "../../gen/**",
      "ioredis",
    ],
    "the day-2 features (admin/, overrides/, offenders/, canary/) build on config, limiter, stats and util; app/ wires them in and gives them their stores (the kv override store speaks Redis through the OverrideStorage of backends/kv/)",
  ),
  boundary(
    ["src/app/**"],
    ["ioredis"],
    "app/ opens no ioredis connection: Redis is spoken only in backends/kv/ (its factories, e.g. connectKvOverrideCommands)",
  ),
  boundary(
    ["src/cli/**", "src/telemetry/**", "src/proto.ts"],
    ["**/app/**"],
    "only src/main.ts imports app/, the composition root",
  ),
  prettier,
);
