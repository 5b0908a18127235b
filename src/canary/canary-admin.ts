// The canary's share of the admin API (`ratelimit.admin.v1.AdminService`: StartCanary,
// GetCanaryReport, StopCanary), registered by src/admin/admin-routes.ts. Maps messages to the
// canary and its errors to RPC codes.

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { CanaryAdmin } from "../admin/admin-routes.js";
import { ConfigError } from "../config/config-error.js";
import {
  StartCanaryResponseSchema,
  StopCanaryResponseSchema,
  type StartCanaryRequest,
} from "../proto.js";
import type { Canary, CanarySource } from "./canary.js";

/** Message of the FAILED_PRECONDITION answer of StopCanary when no canary runs. */
export const noCanaryMessage = "no config canary is running";

/**
 * Serves StartCanary, GetCanaryReport and StopCanary from a {@link Canary}:
 *
 * - StartCanary: INVALID_ARGUMENT when the request gives neither `config_dir` nor `files`, or
 *   both, or a file without a name, and when the candidate does not load (the message is the
 *   loader's text with its file, line and field, `ConfigError.detail`); the live config and a
 *   running canary are then untouched.
 * - GetCanaryReport: the running canary's report, or the last one (`active` false).
 * - StopCanary: the last report; FAILED_PRECONDITION ({@link noCanaryMessage}) when none runs.
 */
export function createCanaryAdmin(canary: Canary): CanaryAdmin {
  return {
    async startCanary(request) {
      const source = canarySource(request);
      let started;
      try {
        started = await canary.start(source);
      } catch (err) {
        if (err instanceof ConfigError)
          throw new ConnectError(
            err.detail,
            Code.InvalidArgument,
            undefined,
            undefined,
            err,
          );
        throw err;
      }
      return create(StartCanaryResponseSchema, {
        startTime: timestampFromMs(started.startMs),
        domains: [...started.domains],
      });
    },

    getCanaryReport() {
      return canary.report();
    },

    async stopCanary() {
      const report = await canary.stop();
      if (report === undefined)
        throw new ConnectError(noCanaryMessage, Code.FailedPrecondition);
      return create(StopCanaryResponseSchema, { report });
    },
  };
}

/** @throws {@link ConnectError} INVALID_ARGUMENT naming the field when the request is unusable */
function canarySource(request: StartCanaryRequest): CanarySource {
  const hasDir = request.configDir !== "";
  const hasFiles = request.files.length > 0;
  if (hasDir === hasFiles)
    throw new ConnectError(
      hasDir
        ? "give config_dir or files, not both"
        : "give config_dir (a directory the service reads) or files (the config files inline)",
      Code.InvalidArgument,
    );
  if (hasDir) return { dir: request.configDir };
  const names = new Set<string>();
  const files = request.files.map((file, i) => {
    if (file.name === "")
      throw new ConnectError(`files[${i}].name is empty`, Code.InvalidArgument);
    if (names.has(file.name))
      throw new ConnectError(
        `files[${i}].name ${JSON.stringify(file.name)} is given twice`,
        Code.InvalidArgument,
      );
    names.add(file.name);
    return { name: file.name, text: file.content };
  });
  return { files };
}
