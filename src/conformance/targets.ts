// How the suite gets a server with a given set of config files: launch mode starts one per
// group of sections (fresh runtime directory, store shared by the run); running mode writes
// the files into the directory of a server already running and waits for its reload. Both
// find out that the files are loaded the same way: a probe file is written last, and the
// probe's rule answering means the reload that read it read every earlier file.
import {
  mkdir,
  mkdtemp,
  rename,
  rm,
  unlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { stringify } from "yaml";
import { launchEnv, type Backend, type Flavour } from "./flavour.js";
import type { ConfigFiles, ProfileSettings } from "./model.js";
import {
  delay,
  freePort,
  startChild,
  startStore,
  type Child,
  type Store,
} from "./processes.js";
import { openWireClient, type WireClient } from "./wire.js";

/** One config file: its name without `.yaml`, and its YAML text. */
export interface ConfigFile {
  readonly name: string;
  readonly text: string;
}

/** A server ready for a group of sections. */
export interface Session {
  readonly client: WireClient;
  /** Every server of the session (the first is `client`). */
  readonly replicas: readonly WireClient[];
  /** The session's own store, when it asked for one. */
  readonly store?: Store;
  readonly files: ConfigFiles;
  close(): Promise<void>;
}

/** Why a session could not be opened. */
export class SessionError extends Error {
  override readonly name = "SessionError";
  constructor(
    message: string,
    /** True when the server runs but never loaded the files: a refused config. */
    readonly configRefused: boolean,
  ) {
    super(message);
  }
}

/** Where sessions come from. */
export interface TargetProvider {
  /** A description for the report's header. */
  readonly description: string;
  /** True when sections with settings of their own can run (launch mode). */
  readonly canApplySettings: boolean;
  /** Why sections with replicas or a store of their own cannot run here, or undefined. */
  readonly noReplicas: string | undefined;
  /**
   * Opens a server with `files` loaded and `settings` applied.
   *
   * @param expectLoaded - false for a server started without any config (health sections)
   * @param shape - `replicas`: servers sharing one store and one config directory;
   *   `ownStore`: a store for this session alone (launch mode)
   * @throws SessionError when no server answers or the files never load
   */
  open(
    files: readonly ConfigFile[],
    settings: ProfileSettings,
    expectLoaded?: boolean,
    shape?: { readonly replicas?: number; readonly ownStore?: boolean },
  ): Promise<Session>;
  close(): Promise<void>;
}

/** Options shared by both modes. */
export interface ProbeOptions {
  /** Unique in this run: prefixes domains and file names. */
  readonly token: string;
  /** How long a reload may take, ms. */
  readonly reloadTimeoutMs: number;
}

const probeRequests = 1_000_000;

/** The probe file and call of one reload generation. */
function probeFile(token: string, generation: number): ConfigFile {
  return {
    name: `${token}-probe`,
    text: stringify({
      domain: `${token}-probe`,
      descriptors: [
        {
          key: "probe",
          value: `g${generation}`,
          rate_limit: { unit: "day", requests_per_unit: probeRequests },
        },
      ],
    }),
  };
}

/**
 * True when the probe rule of `generation` answers with its limit: the reload that read the
 * probe file (written last) read every earlier file too. The probe asks with hits_addend 0,
 * so it never counts.
 */
async function probeLoaded(
  client: WireClient,
  token: string,
  generation: number,
): Promise<boolean> {
  const outcome = await client.call({
    domain: `${token}-probe`,
    descriptors: [{ entries: [["probe", `g${generation}`]], hitsAddend: 0 }],
  });
  return (
    outcome.kind === "answer" &&
    outcome.answer.statuses[0]?.currentLimit?.requestsPerUnit === probeRequests
  );
}

/** Config files in one directory, with the probe written last on each settle. */
class DirectoryFiles implements ConfigFiles {
  private generation = 0;
  constructor(
    private readonly dir: string,
    private readonly client: WireClient,
    private readonly token: string,
    private readonly timeoutMs: number,
  ) {}

  /**
   * Writes `name.yaml` whole or not at all: the text goes to a staging file beside the config
   * directory (outside it: a server may load every file it holds, dotfiles too), then is
   * renamed in. A server reloading on the first event of a plain write could read the file
   * empty or cut short, and load a reload the suite means to fail. Falls back to a plain write
   * when the staging file cannot be made or moved (another file system, no write access).
   */
  async write(name: string, yamlText: string): Promise<void> {
    const target = join(this.dir, `${name}.yaml`);
    const staging = join(
      dirname(this.dir),
      `.${basename(this.dir)}.${String(process.pid)}.${name}.staging`,
    );
    try {
      await writeFile(staging, yamlText);
      await rename(staging, target);
    } catch {
      await unlink(staging).catch(() => undefined);
      await writeFile(target, yamlText);
    }
  }

  async remove(name: string): Promise<void> {
    await unlink(join(this.dir, `${name}.yaml`)).catch(() => undefined);
  }

  async settle(timeoutMs = this.timeoutMs): Promise<boolean> {
    this.generation += 1;
    const probe = probeFile(this.token, this.generation);
    await this.write(probe.name, probe.text);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (await probeLoaded(this.client, this.token, this.generation))
        return true;
      if (Date.now() > deadline) return false;
      await delay(50);
    }
  }
}

/** How many times a server is started on fresh ports when the ports it was given were taken. */
const portAttempts = 3;

/** The operating system's words for a port another process holds (any server's output). */
const portTaken = /EADDRINUSE|address already in use/i;

/** Launch mode: a fresh server per session, one store for the run. */
export class LaunchProvider implements TargetProvider {
  readonly canApplySettings = true;
  readonly description: string;
  private store: Store | undefined;
  private storeStarting: Promise<Store> | undefined;

  constructor(
    private readonly command: string,
    private readonly flavour: Flavour,
    private readonly backend: Backend,
    private readonly probe: ProbeOptions,
    private readonly baseEnv: Readonly<Record<string, string>>,
  ) {
    this.description = `launch '${command}' (flavour ${flavour}, backend ${backend})`;
  }

  private async storeAddress(): Promise<string | undefined> {
    if (this.backend === "memory") return undefined;
    this.storeStarting ??= startStore(this.backend, this.baseEnv);
    this.store = await this.storeStarting;
    return this.store.address;
  }

  get noReplicas(): string | undefined {
    return this.backend === "memory"
      ? "the memory backend keeps counters in each process, with no store to share or freeze: this needs kv or mc"
      : undefined;
  }

  async open(
    files: readonly ConfigFile[],
    settings: ProfileSettings,
    expectLoaded = true,
    shape: { readonly replicas?: number; readonly ownStore?: boolean } = {},
  ): Promise<Session> {
    const replicas = shape.replicas ?? 1;
    const root = await mkdtemp(join(tmpdir(), "ratelimit-conformance-"));
    const dir = join(root, "runtime", "config");
    await mkdir(dir, { recursive: true });
    for (const f of files) await writeFile(join(dir, `${f.name}.yaml`), f.text);
    const initialProbe = probeFile(this.probe.token, 0);
    if (expectLoaded)
      await writeFile(
        join(dir, `${initialProbe.name}.yaml`),
        initialProbe.text,
      );
    const ownStore =
      shape.ownStore === true && this.backend !== "memory"
        ? await startStore(this.backend, this.baseEnv)
        : undefined;
    const store = ownStore?.address ?? (await this.storeAddress());
    const children: Child[] = [];
    const clients: WireClient[] = [];
    const close = async (): Promise<void> => {
      for (const c of clients) c.close();
      await Promise.all(children.map((c) => c.stop()));
      await ownStore?.stop();
      await rm(root, { recursive: true, force: true });
    };
    try {
      for (let i = 0; i < replicas; i++) {
        // A port freePort chose may be taken by another process before the server binds it
        // (servers start side by side): a server that exits saying so is started again on
        // other ports, at most `portAttempts` times.
        for (let attempt = 1; ; attempt++) {
          const [httpPort, grpcPort, debugPort] = [
            await freePort(),
            await freePort(),
            await freePort(),
          ];
          const env = {
            ...this.baseEnv,
            ...launchEnv(
              this.flavour,
              this.backend,
              {
                httpPort,
                grpcPort,
                debugPort,
                runtimeRoot: root,
                subdirectory: "runtime",
                appDirectory: "config",
                ...(store !== undefined ? { store } : {}),
              },
              settings,
            ),
          };
          const child = startChild(this.command, env);
          const client = openWireClient({
            grpc: `127.0.0.1:${grpcPort}`,
            http: `127.0.0.1:${httpPort}`,
          });
          try {
            await waitForListening(child, client);
            if (expectLoaded)
              await waitForProbe(child, client, this.probe.token);
          } catch (error) {
            client.close();
            await child.stop();
            if (
              attempt < portAttempts &&
              child.hasExited() &&
              portTaken.test(child.output())
            )
              continue;
            throw error;
          }
          children.push(child);
          clients.push(client);
          break;
        }
      }
    } catch (error) {
      await close();
      throw error;
    }
    const first = clients[0];
    if (first === undefined)
      throw new SessionError("no replica started", false);
    return {
      client: first,
      replicas: clients,
      ...(ownStore !== undefined ? { store: ownStore } : {}),
      files: new DirectoryFiles(
        dir,
        first,
        this.probe.token,
        this.probe.reloadTimeoutMs,
      ),
      close,
    };
  }

  async close(): Promise<void> {
    await this.store?.stop();
  }
}

async function waitForListening(
  child: Child,
  client: WireClient,
): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.hasExited())
      throw new SessionError(
        `the server exited (${String(await child.exited)}) before it listened:\n${child.output().trim()}`,
        false,
      );
    try {
      if ((await client.http("GET", "/healthcheck")) !== undefined) return;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline)
      throw new SessionError(
        `the server did not answer /healthcheck within 30 s:\n${child.output().trim()}`,
        false,
      );
    await delay(50);
  }
}

async function waitForProbe(
  child: Child,
  client: WireClient,
  token: string,
): Promise<void> {
  // Listening but not loading the files within 10 s: the server refused them (a server that
  // refuses one file refuses the whole reload). Generous: servers start side by side on a
  // loaded machine, and only a refused config pays for the wait.
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.hasExited())
      throw new SessionError(
        `the server exited (${String(await child.exited)}):\n${child.output().trim()}`,
        true,
      );
    if (await probeLoaded(client, token, 0)) return;
    if (Date.now() > deadline)
      throw new SessionError(
        `the server did not load the config files:\n${child.output().trim().slice(-2_000)}`,
        true,
      );
    await delay(50);
  }
}

/** Running mode: a server already running, reloading the files of `dir`. */
export class RunningProvider implements TargetProvider {
  readonly canApplySettings = false;
  readonly noReplicas = "replicas and store freezes need launch mode";
  readonly description: string;
  private readonly client: WireClient;
  private readonly files: DirectoryFiles;
  private readonly token: string;

  constructor(
    grpc: string,
    http: string | undefined,
    private readonly dir: string,
    probe: ProbeOptions,
  ) {
    this.token = probe.token;
    this.description = `running server at ${grpc}${http !== undefined ? ` (HTTP ${http})` : ""}, config directory ${dir}`;
    this.client = openWireClient({
      grpc,
      ...(http !== undefined ? { http } : {}),
    });
    this.files = new DirectoryFiles(
      dir,
      this.client,
      probe.token,
      probe.reloadTimeoutMs,
    );
  }

  async open(files: readonly ConfigFile[]): Promise<Session> {
    for (const f of files) await this.files.write(f.name, f.text);
    const removeAll = async (): Promise<void> => {
      for (const f of files) await this.files.remove(f.name);
    };
    if (!(await this.files.settle())) {
      await removeAll();
      await this.files.settle();
      throw new SessionError(
        `the server did not load the files written into ${this.dir}`,
        true,
      );
    }
    return {
      client: this.client,
      replicas: [this.client],
      files: this.files,
      close: async () => {
        await removeAll();
        await this.files.settle();
      },
    };
  }

  async close(): Promise<void> {
    await this.files.remove(`${this.token}-probe`);
    this.client.close();
  }
}
