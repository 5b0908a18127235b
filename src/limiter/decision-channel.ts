/**
 * The one place where features listen to decisions: each ShouldRateLimit answer's
 * {@link Decision} is published once, after the answer is built, on a `node:diagnostics_channel`
 * channel of its own (named by a Symbol, so two apps in one process stay apart), the way undici
 * publishes its request lifecycle; a request whose store call failed is published on a second
 * one as a {@link DecisionFailure} (undici's `request:error`). Without a subscriber, publishing
 * costs one check, and the service reads no clock for {@link DecisionTimes} unless a
 * subscriber asked for them.
 *
 * Subscribers are called synchronously, before the answer leaves: each must record in O(1),
 * defer the rest (`setImmediate`), and catch its own errors (diagnostics_channel turns a throw
 * into an `uncaughtException`).
 */
import { channel } from "node:diagnostics_channel";
import type { Decision, DecisionTimes } from "./decision.js";
import type { LimitRequest } from "./limit-request.js";

/** A listener of published decisions. */
export type DecisionListener = (decision: Decision) => void;

/**
 * A request the store did not answer: the counting step threw (a `BackendError`, a
 * `CacheKeyError`, the guard's failure mode `error`); the service answers it with an error.
 */
export interface DecisionFailure {
  /** The request as the decision rules resolved it. */
  readonly request: LimitRequest;
  /** What the counting step threw. */
  readonly error: unknown;
  /** When the store was called and when it failed; undefined unless a subscriber asked. */
  readonly times: DecisionTimes | undefined;
}

/** How a listener subscribes ({@link DecisionChannel.subscribe}). */
export interface DecisionSubscription {
  /**
   * Have the service read the clock around each store call and leave the times in
   * `Decision.times` (and `DecisionFailure.times`), e.g. for spans. @defaultValue false
   */
  readonly times?: boolean;
  /** Also told about each request whose store call failed. @defaultValue none */
  readonly onFailure?: (failure: DecisionFailure) => void;
}

/** Publishes each request's {@link Decision} to its subscribers (see the file comment). */
export interface DecisionChannel {
  /** Whether anything listens (when false, callers need not build what they would publish). */
  readonly hasSubscribers: boolean;
  /** Whether a subscriber asked for {@link DecisionTimes} (read once per request). */
  readonly timed: boolean;
  /** Tells every subscriber about one decision; nothing when none listens. */
  publish(decision: Decision): void;
  /** Tells every failure listener about one failed request; nothing when none listens. */
  publishFailure(failure: DecisionFailure): void;
  /**
   * Adds a listener.
   *
   * @returns the function that removes it again (idempotent)
   */
  subscribe(
    listener: DecisionListener,
    options?: DecisionSubscription,
  ): () => void;
}

/** Creates the decision channel of one app. */
export function createDecisionChannel(): DecisionChannel {
  const decisions = channel(Symbol("ratelimit.decision"));
  const failures = channel(Symbol("ratelimit.decision.failure"));
  let timedSubscribers = 0;
  return {
    get hasSubscribers() {
      return decisions.hasSubscribers;
    },
    get timed() {
      return timedSubscribers > 0;
    },
    publish(decision) {
      if (decisions.hasSubscribers) decisions.publish(decision);
    },
    publishFailure(failure) {
      if (failures.hasSubscribers) failures.publish(failure);
    },
    subscribe(listener, options) {
      // Subscribed as they are (no wrapper call per message): each channel carries one type.
      const onMessage = listener as (message: unknown) => void;
      const onFailure = options?.onFailure as
        ((message: unknown) => void) | undefined;
      const timed = options?.times === true;
      decisions.subscribe(onMessage);
      if (onFailure !== undefined) failures.subscribe(onFailure);
      if (timed) timedSubscribers++;
      let subscribed = true;
      return () => {
        if (!subscribed) return;
        subscribed = false;
        decisions.unsubscribe(onMessage);
        if (onFailure !== undefined) failures.unsubscribe(onFailure);
        if (timed) timedSubscribers--;
      };
    },
  };
}
