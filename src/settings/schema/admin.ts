// Day-2 operations (docs/operations.md): the admin API (`ratelimit.admin.v1.AdminService`) with
// run-time overrides, top offenders per rule and a config canary.

import { durationMs, flag, integer, text } from "./codecs.js";
import { setting, settingsGroup } from "./define.js";

export const admin = settingsGroup("admin", {
  /**
   * Serve `ratelimit.admin.v1.AdminService` on the gRPC port too. Off, it answers UNIMPLEMENTED
   * there naming this setting; the debug port serves it whatever it says (docs/operations.md).
   */
  adminEnabled: setting({
    env: "ADMIN_ENABLED",
    codec: flag,
    default: false,
    meaning:
      "Serve the admin API (overrides, top offenders, canary) on the gRPC port too; the debug port always does.",
  }),
  /** Audit records of override changes kept in the backend (the oldest are dropped). */
  adminAuditLogMax: setting({
    env: "ADMIN_AUDIT_LOG_MAX",
    codec: integer({ min: 1, max: 1_000_000 }),
    default: 1000,
    meaning:
      "Audit records of override changes kept in the backend; older ones are dropped.",
  }),
  /**
   * Milliseconds between two checks of the kv store's override versions (BACKEND_TYPE=kv):
   * the longest a change takes to reach a replica that missed its announcement (a reconnect,
   * a lost message); expired overrides are deleted at the same pace. Go duration, > 0, at most 1m.
   */
  adminOverridesSyncIntervalMs: setting({
    env: "ADMIN_OVERRIDES_SYNC_INTERVAL",
    codec: durationMs("positive", 60_000),
    default: 500,
    meaning:
      "kv backend: how often each replica checks the store for override changes it missed (and deletes expired ones); at most 1m.",
  }),
  /**
   * Descriptor values tracked per rule for top offenders (the sketch's size is a multiple of
   * it); 0 turns the tracking off.
   */
  topOffendersK: setting({
    env: "TOP_OFFENDERS_K",
    codec: integer({ min: 0, max: 1000 }),
    default: 20,
    meaning:
      "Top offenders kept per rule (heaviest descriptor values over the current and previous window); 0 turns tracking off.",
  }),
  /**
   * Export the top offenders on the pull-stats endpoint (a bounded set of series: the top K
   * per rule). Off by default so the endpoint's series stay the reference's.
   */
  topOffendersMetrics: setting({
    env: "TOP_OFFENDERS_METRICS",
    codec: flag,
    default: false,
    meaning:
      "Export the top offenders on the pull-stats endpoint (top K series per rule).",
  }),
  /**
   * A directory of candidate config files (as `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY` holds them)
   * loaded as a canary at start-up; empty: none until `StartCanary`.
   */
  canaryConfigDir: setting({
    env: "CANARY_CONFIG_DIR",
    codec: text,
    default: "",
    meaning:
      "Directory of a candidate config evaluated beside the live one (no effect on answers); empty: none until the admin API starts one.",
  }),
});
