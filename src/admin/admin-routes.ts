// Registration of `ratelimit.admin.v1.AdminService` (docs/operations.md) on a Connect router.
// The service has three parts built apart: overrides (src/overrides/), top offenders
// (src/offenders/) and the config canary (src/canary/); a part not given answers
// UNIMPLEMENTED with a message saying so.

import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import type { ServiceImpl } from "@connectrpc/connect";
import { AdminService } from "../proto.js";

/** Every method of the admin service, as Connect calls them. */
export type AdminImpl = ServiceImpl<typeof AdminService>;

/** The overrides part: SetOverride, DeleteOverride, ListOverrides, GetAuditLog. */
export type OverridesAdmin = Pick<
  AdminImpl,
  "setOverride" | "deleteOverride" | "listOverrides" | "getAuditLog"
>;
/** The top-offenders part: TopOffenders. */
export type OffendersAdmin = Pick<AdminImpl, "topOffenders">;
/** The canary part: StartCanary, GetCanaryReport, StopCanary. */
export type CanaryAdmin = Pick<
  AdminImpl,
  "startCanary" | "getCanaryReport" | "stopCanary"
>;

/** The parts of the admin service a process serves. */
export interface AdminParts {
  readonly overrides?: OverridesAdmin;
  readonly offenders?: OffendersAdmin;
  readonly canary?: CanaryAdmin;
}

/** Message of the UNIMPLEMENTED answer on the gRPC port while `ADMIN_ENABLED` is off. */
export const adminDisabledMessage =
  "the admin API is disabled on this port: set ADMIN_ENABLED=true to enable it (the debug port always serves it)";

/** URL path prefix of the admin service's methods. */
export const adminPathPrefix = `/${AdminService.typeName}/`;

function unimplemented(message: string): () => never {
  return () => {
    throw new ConnectError(message, Code.Unimplemented);
  };
}

/**
 * Registers `ratelimit.admin.v1.AdminService` on a router: the parts given, UNIMPLEMENTED
 * (naming the missing part) for the others, and UNIMPLEMENTED naming `ADMIN_ENABLED` for every
 * method when `parts` is undefined.
 */
export function registerAdmin(
  router: ConnectRouter,
  parts: AdminParts | undefined,
): void {
  if (parts === undefined) {
    const off = unimplemented(adminDisabledMessage);
    router.service(AdminService, {
      setOverride: off,
      deleteOverride: off,
      listOverrides: off,
      getAuditLog: off,
      topOffenders: off,
      startCanary: off,
      getCanaryReport: off,
      stopCanary: off,
    });
    return;
  }
  const noOverrides = unimplemented(
    "run-time overrides are not available in this process",
  );
  const noOffenders = unimplemented(
    "top offenders are not tracked: TOP_OFFENDERS_K is 0",
  );
  const noCanary = unimplemented(
    "the config canary is not available in this process",
  );
  const { overrides, offenders, canary } = parts;
  router.service(AdminService, {
    setOverride: overrides?.setOverride.bind(overrides) ?? noOverrides,
    deleteOverride: overrides?.deleteOverride.bind(overrides) ?? noOverrides,
    listOverrides: overrides?.listOverrides.bind(overrides) ?? noOverrides,
    getAuditLog: overrides?.getAuditLog.bind(overrides) ?? noOverrides,
    topOffenders: offenders?.topOffenders.bind(offenders) ?? noOffenders,
    startCanary: canary?.startCanary.bind(canary) ?? noCanary,
    getCanaryReport: canary?.getCanaryReport.bind(canary) ?? noCanary,
    stopCanary: canary?.stopCanary.bind(canary) ?? noCanary,
  });
}
