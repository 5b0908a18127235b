// RLQS (envoy.service.rate_limit_quota.v3): how often quota is re-split among the Envoys, how
// long an assignment holds, and when an idle bucket is abandoned (docs/rlqs.md).

import { wholeSecondsMs } from "./codecs.js";
import { setting, settingsGroup } from "./define.js";

/** Longest RLQS duration: one day (Node timers take at most about 24.8 days). */
const maxRlqsMs = 24 * 60 * 60 * 1000;

export const rlqs = settingsGroup("rlqs", {
  /**
   * Milliseconds between two re-splits of every bucket's limit among the streams reporting it
   * (whole seconds). Envoy 1.40 reports every 5 s whatever its `reporting_interval` says.
   */
  rlqsReportIntervalMs: setting({
    env: "RLQS_REPORT_INTERVAL",
    codec: wholeSecondsMs(maxRlqsMs),
    default: 5_000,
    meaning:
      "RLQS: time between re-splits of each bucket's limit among the Envoys (whole seconds; Envoy 1.40 reports every 5s).",
  }),
  /**
   * `assignment_time_to_live` of every pushed quota assignment, milliseconds (whole seconds:
   * Envoy truncates it).
   */
  rlqsAssignmentTtlMs: setting({
    env: "RLQS_ASSIGNMENT_TTL",
    codec: wholeSecondsMs(maxRlqsMs),
    default: 15_000,
    meaning:
      "RLQS: time to live of each pushed quota assignment (whole seconds).",
  }),
  /**
   * Milliseconds without a request reported in a bucket after which the server abandons it on
   * that stream (Envoy reports idle buckets as 0/0 until abandoned).
   */
  rlqsAbandonAfterMs: setting({
    env: "RLQS_ABANDON_AFTER",
    codec: wholeSecondsMs(maxRlqsMs),
    default: 60_000,
    meaning:
      "RLQS: a bucket with no request reported for this long is abandoned (whole seconds).",
  }),
});
