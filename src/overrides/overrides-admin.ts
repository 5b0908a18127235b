// The overrides part of the admin API (`ratelimit.admin.v1.AdminService`: SetOverride,
// DeleteOverride, ListOverrides, GetAuditLog; docs/operations.md "Overrides"): checks each
// call, resolves the override against the loaded config, and hands it to the store. Errors
// answer with a code and a message naming the field: INVALID_ARGUMENT for a malformed call,
// FAILED_PRECONDITION for one the loaded config refuses, NOT_FOUND for a delete of nothing,
// UNAVAILABLE when the store fails.

import { create } from "@bufbuild/protobuf";
import { durationMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { OverridesAdmin } from "../admin/admin-routes.js";
import { findRateLimit } from "../config/descriptor-lookup.js";
import type {
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import { BackendError } from "../limiter/backend-error.js";
import {
  DeleteOverrideResponseSchema,
  GetAuditLogResponseSchema,
  ListOverridesResponseSchema,
  OverrideLimitSchema,
  RateLimitDescriptor_EntrySchema,
  SetOverrideResponseSchema,
  type AdminEntry,
} from "../proto.js";
import { createStatsManager } from "../stats/stats-manager.js";
import type { Clock } from "../util/clock.js";
import { descriptorText, type OverrideEntry } from "./override-key.js";
import {
  compileOverrideLimit,
  OverrideLimitError,
  resolveOverrideLimit,
} from "./override-limit.js";
import { toOverrideMessage } from "./override-message.js";
import type { OverrideStore } from "./override-store.js";
import type { OverrideRecord } from "./override-table.js";
import { peerIdentityKey } from "../service/peer-identity.js";

/** Request header naming who makes a change (recorded in the audit log). */
export const actorHeader = "x-ratelimit-actor";

/** Actor recorded when the call names none. */
export const anonymousActor = "anonymous";

/** Longest `reason` and actor accepted, in characters. */
const maxTextLength = 1024;

/** Options of {@link createOverridesAdmin}. */
export interface OverridesAdminOptions {
  readonly store: OverrideStore;
  /** The config in force (overrides are checked against its rules). */
  readonly currentConfig: () => RateLimitConfig | undefined;
  readonly clock: Clock;
  /** `ADMIN_AUDIT_LOG_MAX`: the most records GetAuditLog returns. */
  readonly auditLogMax: number;
  readonly logger: Logger;
}

/**
 * Builds the overrides part of the admin API over a store. Every change is logged at `info`
 * (an operator's action, not a request's).
 */
export function createOverridesAdmin(
  options: OverridesAdminOptions,
): OverridesAdmin {
  const { store, clock, logger } = options;

  /** The rule a descriptor reaches in the loaded config, or a FAILED_PRECONDITION. */
  function ruleOf(
    config: RateLimitConfig,
    domain: string,
    entries: readonly OverrideEntry[],
  ): RateLimit {
    const root = config.view?.domainRules(domain);
    if (root === undefined)
      throw new ConnectError(
        `domain: '${domain}' is not in the loaded rate limit configuration`,
        Code.FailedPrecondition,
      );
    const rule = lookUp(config, domain, entries, createStatsManager());
    if (rule === undefined)
      throw new ConnectError(
        `entries: the descriptor ${descriptorText(entries)} matches no rule with a rate limit in domain '${domain}' (an override replaces a rule's limit; add the rule to the config first)`,
        Code.FailedPrecondition,
      );
    return rule;
  }

  function loadedConfig(): RateLimitConfig {
    const config = options.currentConfig();
    if (config === undefined)
      throw new ConnectError(
        "no rate limit configuration loaded yet",
        Code.FailedPrecondition,
      );
    return config;
  }

  return {
    async setOverride(request, context) {
      const domain = checkDomain(request.domain);
      const entries = checkEntries(request.entries);
      const reason = checkText("reason", request.reason);
      const actor = actorOf(context);
      const ttl = request.ttl === undefined ? 0 : durationMs(request.ttl);
      if (!(ttl >= 0))
        throw new ConnectError(
          "ttl: must not be negative (unset or 0: until deleted)",
          Code.InvalidArgument,
        );
      if (request.limit === undefined)
        throw new ConnectError(
          "limit: must be set (requests_per_unit and unit, or unlimited)",
          Code.InvalidArgument,
        );
      const rule = ruleOf(loadedConfig(), domain, entries);
      const limit = invalidArgument(() => {
        const resolved = resolveOverrideLimit(
          request.limit ?? create(OverrideLimitSchema),
          rule,
        );
        compileOverrideLimit(resolved);
        return resolved;
      });
      const nowMs = clock.nowMs();
      const record: OverrideRecord = {
        domain,
        entries,
        limit,
        expireMs: ttl > 0 ? nowMs + ttl : undefined,
        reason,
        actor,
        updateMs: nowMs,
      };
      const before = await unavailable(() => store.set(record));
      logger.info(
        {
          domain,
          descriptor: descriptorText(entries),
          actor,
          reason,
          replaced: before !== undefined,
        },
        "override set",
      );
      return create(SetOverrideResponseSchema, {
        override: toOverrideMessage(record, rule.stats.key),
      });
    },

    async deleteOverride(request, context) {
      const domain = checkDomain(request.domain);
      const entries = checkEntries(request.entries);
      const reason = checkText("reason", request.reason);
      const actor = actorOf(context);
      const deleted = await unavailable(() =>
        store.delete(domain, entries, actor, reason),
      );
      if (deleted === undefined)
        throw new ConnectError(
          `no override of ${descriptorText(entries)} in domain '${domain}'`,
          Code.NotFound,
        );
      logger.info(
        { domain, descriptor: descriptorText(entries), actor, reason },
        "override deleted",
      );
      const config = options.currentConfig();
      return create(DeleteOverrideResponseSchema, {
        override: toOverrideMessage(
          deleted,
          config === undefined ? "" : ruleKey(config, deleted),
        ),
      });
    },

    listOverrides(request) {
      const config = options.currentConfig();
      const stats = createStatsManager();
      const records = store.table.list(
        request.domain === "" ? undefined : request.domain,
        clock.nowMs(),
      );
      const shown =
        request.limit > 0 && request.limit < records.length
          ? records.slice(0, request.limit)
          : records;
      return Promise.resolve(
        create(ListOverridesResponseSchema, {
          total: records.length,
          overrides: shown.map((record) =>
            toOverrideMessage(
              record,
              config === undefined ? "" : ruleKey(config, record, stats),
            ),
          ),
        }),
      );
    },

    async getAuditLog(request) {
      const max = options.auditLogMax;
      const records = await unavailable(() =>
        store.auditLog(
          request.domain === "" ? undefined : request.domain,
          request.limit === 0 ? max : Math.min(request.limit, max),
        ),
      );
      return create(GetAuditLogResponseSchema, { records });
    },
  };
}

/**
 * The rule a descriptor reaches: the tree walk of ShouldRateLimit, with the entries as given (a
 * wildcard override's pattern value is looked up as it is written). Counts no statistic of the
 * service: derived stats keys go to `stats`, a private manager.
 */
function lookUp(
  config: RateLimitConfig,
  domain: string,
  entries: readonly OverrideEntry[],
  stats: ReturnType<typeof createStatsManager>,
): RateLimit | undefined {
  const root = config.view?.domainRules(domain);
  if (root === undefined) return undefined;
  return findRateLimit(
    root,
    domain,
    entries.map((e) =>
      create(RateLimitDescriptor_EntrySchema, { key: e.key, value: e.value }),
    ),
    stats,
  );
}

/** The stats key of the rule an override's descriptor reaches now; "" when none. */
function ruleKey(
  config: RateLimitConfig,
  record: OverrideRecord,
  stats = createStatsManager(),
): string {
  return lookUp(config, record.domain, record.entries, stats)?.stats.key ?? "";
}

function checkDomain(domain: string): string {
  if (domain === "")
    throw new ConnectError("domain: must be set", Code.InvalidArgument);
  return domain;
}

/**
 * Checks the entries of an override: at least one, every key set, and `*` only at the end of
 * a value (a prefix wildcard, as in the YAML).
 */
function checkEntries(entries: readonly AdminEntry[]): OverrideEntry[] {
  if (entries.length === 0)
    throw new ConnectError(
      "entries: must name the descriptor (one or more {key, value})",
      Code.InvalidArgument,
    );
  return entries.map((entry, i) => {
    if (entry.key === "")
      throw new ConnectError(
        `entries[${String(i)}].key: must be set`,
        Code.InvalidArgument,
      );
    const star = entry.value.indexOf("*");
    if (star >= 0 && star !== entry.value.length - 1)
      throw new ConnectError(
        `entries[${String(i)}].value: '${entry.value}' has a '*' before its end (only a trailing '*', a prefix wildcard, is supported)`,
        Code.InvalidArgument,
      );
    return { key: entry.key, value: entry.value };
  });
}

function checkText(field: string, text: string): string {
  if (text.length > maxTextLength)
    throw new ConnectError(
      `${field}: longer than ${String(maxTextLength)} characters`,
      Code.InvalidArgument,
    );
  return text;
}

/**
 * Who makes the call, for the audit log: the identity of the caller's verified TLS client
 * certificate (`peerIdentityKey`: URI SAN, else DNS SAN, else CN) and the `x-ratelimit-actor`
 * header. Both: `<header> via <identity>` (the header is what the caller says, the identity
 * what TLS proved); one of them: that one; neither: "anonymous".
 */
export function actorOf(context: HandlerContext): string {
  const header = context.requestHeader.get(actorHeader)?.trim() ?? "";
  const identity = context.values.get(peerIdentityKey);
  const actor =
    identity === undefined
      ? header
      : header === "" || header === identity
        ? identity
        : `${header} via ${identity}`;
  if (actor === "") return anonymousActor;
  return actor.length > maxTextLength ? actor.slice(0, maxTextLength) : actor;
}

/** Runs `check`, answering its {@link OverrideLimitError} with INVALID_ARGUMENT. */
function invalidArgument<T>(check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (err instanceof OverrideLimitError)
      throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
}

/** Awaits a store call, answering its {@link BackendError} with UNAVAILABLE. */
async function unavailable<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof BackendError)
      throw new ConnectError(err.message, Code.Unavailable);
    if (err instanceof OverrideLimitError)
      throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
}
