/**
 * The one place where features listen to decisions: each ShouldRateLimit answer's
 * {@link Decision} is published once, after the answer is built, on a `node:diagnostics_channel`
 * channel of its own (named by a Symbol, so two apps in one process stay apart), the way undici
 * publishes its request lifecycle. Without a subscriber, publishing costs one check.
 *
 * Subscribers are called synchronously, before the answer leaves: each must record in O(1),
 * defer the rest (`setImmediate`), and catch its own errors (diagnostics_channel turns a throw
 * into an `uncaughtException`).
 */
import { channel } from "node:diagnostics_channel";
import type { Decision } from "./decision.js";

/** A listener of published decisions. */
export type DecisionListener = (decision: Decision) => void;

/** Publishes each request's {@link Decision} to its subscribers (see the file comment). */
export interface DecisionChannel {
  /** Whether anything listens (when false, callers need not build what they would publish). */
  readonly hasSubscribers: boolean;
  /** Tells every subscriber about one decision; nothing when none listens. */
  publish(decision: Decision): void;
  /**
   * Adds a listener.
   *
   * @returns the function that removes it again (idempotent)
   */
  subscribe(listener: DecisionListener): () => void;
}

/** Creates the decision channel of one app. */
export function createDecisionChannel(): DecisionChannel {
  const decisions = channel(Symbol("ratelimit.decision"));
  return {
    get hasSubscribers() {
      return decisions.hasSubscribers;
    },
    publish(decision) {
      if (decisions.hasSubscribers) decisions.publish(decision);
    },
    subscribe(listener) {
      // Subscribed as it is (no wrapper call per decision): this channel carries Decisions only.
      const onMessage = listener as (message: unknown) => void;
      decisions.subscribe(onMessage);
      let subscribed = true;
      return () => {
        if (!subscribed) return;
        subscribed = false;
        decisions.unsubscribe(onMessage);
      };
    },
  };
}
