/** What {@link limitConnectionAge} needs of a connection, whichever HTTP/2 engine serves it. */
export interface AgedConnection {
  /** Whether the connection is already closed or closing. */
  isClosed(): boolean;
  /** Sends GOAWAY: calls in flight continue, new ones go to a new connection. */
  goAway(): void;
  /** Closes the connection at once, calls in flight included. */
  destroy(): void;
  /** Registers `listener` for when the connection has closed. */
  onceClosed(listener: () => void): void;
}

/**
 * Sends GOAWAY after `ageMs` ±10 % (drawn once per connection from `random`, in [0, 1)), then
 * destroys the connection `graceMs` later if calls are still open; same as grpc-go's
 * MaxConnectionAge / MaxConnectionAgeGrace (`GRPC_MAX_CONNECTION_AGE`,
 * `GRPC_MAX_CONNECTION_AGE_GRACE`). Both timers are unref'd and cleared when the connection
 * closes. Times in ms.
 */
export function limitConnectionAge(
  connection: AgedConnection,
  ageMs: number,
  graceMs: number,
  random: () => number,
): void {
  let graceTimer: NodeJS.Timeout | undefined;
  const ageTimer = setTimeout(
    () => {
      if (connection.isClosed()) return;
      connection.goAway();
      graceTimer = setTimeout(() => {
        connection.destroy();
      }, graceMs);
      graceTimer.unref();
    },
    ageMs * (0.9 + 0.2 * random()),
  );
  ageTimer.unref();
  connection.onceClosed(() => {
    clearTimeout(ageTimer);
    clearTimeout(graceTimer);
  });
}
