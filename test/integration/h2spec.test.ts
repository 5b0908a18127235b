import { execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GrpcHttp2Engine } from "../../src/server/grpc/grpc-server.js";
import {
  memoryServiceEnv,
  repoRoot,
  spawnNode,
  type Spawned,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

// h2spec (github.com/summerwind/h2spec, installed by scripts/ensure-h2spec.sh) against the
// spawned service's gRPC port, cleartext, on both HTTP/2 engines and two paths: `/` (no route:
// 404) and ShouldRateLimit (h2spec sends GET, so the Connect router answers). Every failure
// must be on the allow-list below, each entry with the reason it is not a bug of ours.

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const paths = ["/", shouldRateLimitPath] as const;
type TargetPath = (typeof paths)[number];

/** Seconds h2spec waits for each expected frame (its `-o`; its default is 2). */
const frameTimeoutSeconds = 3;

/** A failure h2spec may report without failing the test. */
interface Allowance {
  /** h2spec's id: `<spec>/<section>/<number>`, as `h2spec <id>` runs it alone. */
  readonly id: string;
  readonly paths: readonly TargetPath[];
}

const bothPaths = paths;

const allowedFailures: Record<GrpcHttp2Engine, readonly Allowance[]> = {
  builtin: [
    // §5.1.2: streams count toward SETTINGS_MAX_CONCURRENT_STREAMS (1000) while open or
    // half-closed. h2spec sets INITIAL_WINDOW_SIZE 0 and sends 1001 GET streams with
    // END_STREAM, expecting the zero window to hold every response open so that the last one
    // is refused. Our answers (404, or the Connect router's answer to a GET) have no body:
    // HEADERS then an empty DATA with END_STREAM, which needs no window (§6.9.1: "Frames with
    // zero length with the END_STREAM flag set ... MAY be sent if there is no available
    // space"), so each stream closes before the next arrives and the limit is never exceeded.
    { id: "http2/5.1.2/1", paths: bothPaths },
    // §8.1: "A server can send a complete response prior to the client sending an entire
    // request". On the ShouldRateLimit path h2spec sends a GET without END_STREAM, which the
    // Connect router refuses at once (HEADERS, empty DATA END_STREAM, RST_STREAM NO_ERROR);
    // whether h2spec's next frames (WINDOW_UPDATEs past 2^31-1, trailers with a pseudo-header)
    // arrive before that answer is a race, so these pass or fail by timing (on a fast, quiet
    // machine they fail every time). The stream is
    // closed by then and the frames are ignored, as §5.1 requires after sending RST_STREAM.
    { id: "http2/6.9.1/3", paths: [shouldRateLimitPath] },
    { id: "http2/8.1.2.1/3", paths: [shouldRateLimitPath] },
    // The same race: a second HEADERS without END_STREAM after the GET (PROTOCOL_ERROR).
    { id: "http2/8.1/1", paths: [shouldRateLimitPath] },
    // The same race again (§8.1.2.6): a content-length that the DATA frames that follow do not
    // match. The Connect router refuses the request from its headers alone, so the mismatch
    // can only be seen when the DATA arrives before the answer; otherwise it lands on a stream
    // we have already reset. Failed 5 of 30 runs on a quiet machine, 3 of 3 in a busy CI.
    { id: "http2/8.1.2.6/1", paths: [shouldRateLimitPath] },
    { id: "http2/8.1.2.6/2", paths: [shouldRateLimitPath] },
  ],
  // node:http2 (nghttp2 inside Node): none of these is in this repository's code, and no
  // node:http2 option changes them.
  node: [
    // §8.1: a response may be a single HEADERS frame with END_STREAM. node:http2 frames the
    // bodiless 404 that way; h2spec (generic/2) expects a DATA frame after its WINDOW_UPDATE
    // or PRIORITY on the half-closed stream.
    { id: "generic/2/2", paths: ["/"] },
    { id: "generic/2/3", paths: ["/"] },
    // §5.1 "closed": DATA or HEADERS after the client's RST_STREAM, or after both sides ended
    // the stream, should be a STREAM_CLOSED error. nghttp2 keeps no state for streams it has
    // closed and ignores their frames, as §5.1 requires after an endpoint *sent* RST_STREAM
    // (it cannot tell the cases apart); the frames are dropped, nothing is served.
    { id: "http2/5.1/8", paths: bothPaths },
    // §8.1: node:http2 answers the bodiless 404 on "/" as one HEADERS frame with END_STREAM,
    // which can close the stream before h2spec's HEADERS on the half-closed stream arrives
    // (a race: it passes or fails by timing).
    { id: "http2/5.1/6", paths: ["/"] },
    { id: "http2/5.1/9", paths: bothPaths },
    { id: "http2/5.1/11", paths: bothPaths },
    { id: "http2/5.1/12", paths: bothPaths },
    // §6.1: DATA on a stream that is no longer open (here: answered and closed before h2spec's
    // DATA arrived, which depends on timing) should be a STREAM_CLOSED error; same as above.
    { id: "http2/6.1/2", paths: bothPaths },
    // §5.1.1: HEADERS on stream 3 after stream 5 should be a connection error PROTOCOL_ERROR.
    // nghttp2 takes a lower id for a stream it closed and ignores the block (same reason).
    { id: "http2/5.1.1/2", paths: bothPaths },
    // §5.3.1 (self-dependent PRIORITY, a stream error) and §6.3 (PRIORITY on stream 0, a
    // connection error): nghttp2 ignores PRIORITY frames; RFC 9113 §5.3.2 deprecates the
    // priority scheme they carry, and the server does nothing with them either way.
    { id: "http2/5.3.1/2", paths: bothPaths },
    { id: "http2/6.3/1", paths: bothPaths },
    // §6.7: a PING with ACK must not be answered. Node goes further and closes the session on
    // an ACK for a PING it never sent (a deliberate check in Node's http2 session), so
    // h2spec's next PING gets no answer. Ending a connection is always allowed (§5.4.1).
    { id: "http2/6.7/2", paths: bothPaths },
    // §6.9.1: a stream window above 2^31-1 is a stream error FLOW_CONTROL_ERROR; node:http2
    // ends the whole connection with GOAWAY FLOW_CONTROL_ERROR, which §5.4.1 allows ("an
    // endpoint MAY choose to treat a stream error as a connection error").
    { id: "http2/6.9.1/3", paths: bothPaths },
    // §8.1.2.6, the race described for the builtin engine: nghttp2 checks content-length
    // only for DATA that arrives while the stream is open, and the refusal of h2spec's request
    // can close it first (seen on a busy machine; passes when h2spec's DATA wins).
    { id: "http2/8.1.2.6/1", paths: [shouldRateLimitPath] },
    { id: "http2/8.1.2.6/2", paths: [shouldRateLimitPath] },
    // §5.1.2, as on the builtin engine: with SETTINGS_MAX_CONCURRENT_STREAMS announced (1000),
    // node:http2 answers each bodiless request with a single HEADERS frame with END_STREAM
    // (no window needed), so each stream closes before the next arrives; the limit is never
    // exceeded.
    { id: "http2/5.1.2/1", paths: bothPaths },
  ],
};

/** One h2spec test case from its JUnit report. */
interface CaseResult {
  readonly id: string;
  readonly title: string;
  readonly outcome: "passed" | "failed" | "skipped";
  /** What h2spec expected, then what it got (failures only). */
  readonly detail: string;
}

/**
 * Reads h2spec's JUnit report. Test suites carry the section (`package="http2/5.1"`); a case's
 * number is its position in the suite. Parsed with regular expressions: h2spec copies frame
 * payloads into the report verbatim, so it is not always well-formed XML.
 */
function parseH2specJunit(xml: string): CaseResult[] {
  const results: CaseResult[] = [];
  for (const suite of xml.matchAll(
    /<testsuite\s[^>]*package="([^"]+)"[^>]*>([\s\S]*?)<\/testsuite>/g,
  )) {
    let number = 0;
    for (const testCase of (suite[2] ?? "").matchAll(
      /<testcase\s[^>]*classname="([^"]*)"[^>]*?(?:\/>|>([\s\S]*?)<\/testcase>)/g,
    )) {
      number++;
      const body = testCase[2] ?? "";
      const failure = /<(error|failure)[^>]*>([\s\S]*?)<\/\1>/.exec(body);
      results.push({
        id: `${suite[1] ?? ""}/${number}`,
        title: unescapeXml(testCase[1] ?? ""),
        outcome:
          failure !== null
            ? "failed"
            : body.includes("<skipped")
              ? "skipped"
              : "passed",
        detail: failure === null ? "" : unescapeXml(failure[2] ?? "").trim(),
      });
    }
  }
  return results;
}

function unescapeXml(text: string): string {
  return text
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&quot;", '"')
    .replaceAll("&#39;", "'")
    .replaceAll("&#34;", '"')
    .replaceAll("&amp;", "&");
}

/** Runs h2spec once; resolves with its JUnit results and its text output. */
function runH2spec(
  binary: string,
  port: number,
  path: string,
  junitFile: string,
  ids: readonly string[] = [],
): Promise<{ results: CaseResult[]; output: string; exit: number | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      binary,
      [
        "-h",
        "127.0.0.1",
        "-p",
        String(port),
        "-P",
        path,
        "-o",
        String(frameTimeoutSeconds),
        "-j",
        junitFile,
        ...ids,
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString("latin1")));
    child.stderr.on("data", (d: Buffer) => (output += d.toString("latin1")));
    child.on("error", reject);
    child.on("close", (exit) => {
      readFile(junitFile, "latin1").then(
        (xml) => {
          resolve({ results: parseH2specJunit(xml), output, exit });
        },
        (err: unknown) => {
          reject(
            new Error(`h2spec wrote no report (exit ${exit}): ${output}`, {
              cause: err,
            }),
          );
        },
      );
    });
  });
}

const config = `
domain: h2spec
descriptors:
  - key: a
    rate_limit: { unit: second, requests_per_unit: 5 }
`;

describe("h2spec", () => {
  let binary = "";
  let root = "";

  beforeAll(async () => {
    // `make integration` and `make test` install it first (target h2spec); this covers a bare
    // `vitest run`. Fast when present.
    const { stdout } = await promisify(execFile)(
      join(repoRoot, "scripts", "ensure-h2spec.sh"),
      [],
      { timeout: 240_000 },
    );
    binary = stdout.trim().split("\n").at(-1) ?? "";
    root = await mkdtemp(join(tmpdir(), "rls-h2spec-"));
    await mkdir(join(root, "config"));
    await writeFile(join(root, "config", "h2spec.yaml"), config);
  }, 300_000);

  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });

  describe.each(["builtin", "node"] as const)(
    "against the gRPC port (%s engine)",
    (engine) => {
      let service: Spawned;
      let port = 0;

      beforeAll(async () => {
        const spawnEnv = await memoryServiceEnv(engine, root);
        port = spawnEnv.grpcPort;
        service = spawnNode("dist/src/main.js", [], spawnEnv.env);
        await waitFor(
          () => service.output().includes("listening for gRPC"),
          "the service to listen",
          20_000,
        );
      });

      afterAll(async () => {
        if (service.child.exitCode === null) service.child.kill("SIGKILL");
        await service.exited;
      });

      it.each(paths)(
        "fails no h2spec case beyond the allow-list (path %s)",
        async (path) => {
          const started = Date.now();
          const { results, output, exit } = await runH2spec(
            binary,
            port,
            path,
            join(root, `junit-${engine}-${path === "/" ? "root" : "srl"}.xml`),
          );
          const allowed = new Set(
            allowedFailures[engine]
              .filter((a) => a.paths.includes(path))
              .map((a) => a.id),
          );
          const failed = results.filter((r) => r.outcome === "failed");
          const skipped = results.filter((r) => r.outcome === "skipped");
          console.log(
            `h2spec ${engine} ${path}: ${results.length} cases, ${failed.length} failed ` +
              `(${failed.map((r) => r.id).join(" ") || "none"}), ${skipped.length} skipped ` +
              `(${skipped.map((r) => r.id).join(" ")}); allowed but passed: ` +
              `${[...allowed].filter((id) => !failed.some((r) => r.id === id)).join(" ") || "none"}; ` +
              `${((Date.now() - started) / 1000).toFixed(1)} s`,
          );
          // h2spec 2.2.1 has 145 cases (generic, http2, hpack); a short report means it broke.
          expect(results.length, output).toBeGreaterThanOrEqual(145);
          expect(exit, output).not.toBeNull();
          // A case whose outcome depends on timing (our answer racing h2spec's next frame) is
          // run twice more on its own: only a case that fails every time counts.
          let unexpected = failed.filter((r) => !allowed.has(r.id));
          for (let retry = 0; retry < 2 && unexpected.length > 0; retry++) {
            const again = await runH2spec(
              binary,
              port,
              path,
              join(root, `junit-retry-${engine}-${String(retry)}.xml`),
              unexpected.map((r) => r.id),
            );
            const stillFailing = new Set(
              again.results
                .filter((r) => r.outcome === "failed")
                .map((r) => r.id),
            );
            const flaky = unexpected.filter((r) => !stillFailing.has(r.id));
            if (flaky.length > 0)
              console.log(
                `h2spec ${engine} ${path}: passed on a rerun (timing): ${flaky.map((r) => r.id).join(" ")}`,
              );
            unexpected = unexpected.filter((r) => stillFailing.has(r.id));
          }
          expect(
            unexpected.map(
              (r) => `${r.id} ${r.title}: ${r.detail.replace(/\s+/g, " ")}`,
            ),
            `h2spec failures on the ${engine} engine, path ${path}`,
          ).toEqual([]);
          expect(
            service.child.exitCode,
            `service exited: ${service.output()}`,
          ).toBeNull();
          const errors = service
            .output()
            .split("\n")
            .filter(
              (l) =>
                l.includes('"level":"error"') || l.includes('"level":"fatal"'),
            );
          expect(errors).toEqual([]);
        },
        180_000,
      );
    },
  );
});
