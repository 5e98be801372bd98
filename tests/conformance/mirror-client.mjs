// The conformance suite's "client": mirrors the scenario server at the URL it is given, then stops.
//
// `conformance client --command "node tests/conformance/mirror-client.mjs" --scenario S` starts
// scenario S's test server and runs this script with the server's URL as its last argument.
// It writes a daemon.toml for that one server into a scratch directory, runs the real
// `mcp-mirror serve` on it, polls `mcp-mirror status --json` until the server has settled
// (synced with its push channel decided, or no resources, or failed), prints that status and
// stops the daemon with SIGTERM. The scenario's checks are what the daemon sent on the way.
//
// Environment: MCP_MIRROR is the binary (default target/debug/mcp-mirror);
// MIRROR_CLIENT_DEADLINE_MS bounds the wait (default 20000).
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repository = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const mirror = process.env.MCP_MIRROR ?? join(repository, "target/debug/mcp-mirror");
const deadlineMs = Number(process.env.MIRROR_CLIENT_DEADLINE_MS ?? 20000);
const url = process.argv.at(-1);
if (!url || !/^https?:\/\//.test(url)) {
  console.error(`mirror-client: expected the server's URL as the last argument, got ${url}`);
  process.exit(2);
}

const scratch = mkdtempSync(join(tmpdir(), "mcp-mirror-conformance-"));
const socket = join(scratch, "mirror.sock");
const config = join(scratch, "daemon.toml");
writeFileSync(
  config,
  [
    "[daemon]",
    `database = ${JSON.stringify(join(scratch, "catalog.db"))}`,
    `socket = ${JSON.stringify(socket)}`,
    'request_timeout = "5s"',
    "",
    "[servers.conformance]",
    `url = ${JSON.stringify(url)}`,
    "",
  ].join("\n"),
);

const daemon = spawn(mirror, ["serve", "--config", config], {
  env: { ...process.env, RUST_LOG: "info,mcp_mirror=debug" },
  stdio: ["ignore", "ignore", "pipe"],
});
let daemonLog = "";
daemon.stderr.on("data", (chunk) => {
  daemonLog += chunk.toString();
});
let daemonExit = null;
const daemonExited = new Promise((done) =>
  daemon.on("exit", (code, signal) => {
    daemonExit = signal ?? code;
    done();
  }),
);

/** The conformance server's status from the daemon, or null while the socket does not answer. */
function serverStatus() {
  const answer = spawnSync(mirror, ["status", "--json", "--socket", socket], {
    encoding: "utf8",
    timeout: 5000,
  });
  if (answer.status !== 0) return null;
  return parseJson(answer.stdout)?.servers?.find((server) => server.name === "conformance") ?? null;
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** "ok" or "failed" once the server has settled; null while it is still getting there. */
function settled(status) {
  if (!status) return null;
  // A push channel that is still opening is not settled: a scenario may watch it open.
  const opening = status.live?.push?.startsWith("opening") ?? false;
  switch (status.state) {
    case "no_resources":
    case "synced":
      return opening ? null : "ok";
    case "failed":
    case "backing_off":
    case "reconnecting":
    case "offline":
      return "failed";
    default:
      return null;
  }
}

// If the suite gives up on us (its --timeout), the daemon must not outlive this script.
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    daemon.kill("SIGKILL");
    rmSync(scratch, { recursive: true, force: true });
    process.exit(1);
  });
}

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

async function stopDaemon() {
  if (daemonExit === null) {
    daemon.kill("SIGTERM");
    const stopped = await Promise.race([daemonExited.then(() => true), sleep(10000).then(() => false)]);
    if (!stopped) {
      console.error("mirror-client: the daemon did not stop within 10s of SIGTERM; killing it");
      daemon.kill("SIGKILL");
      await daemonExited;
    }
  }
}

let outcome = "timed out";
let last = null;
const deadline = Date.now() + deadlineMs;
while (Date.now() < deadline) {
  if (daemonExit !== null) {
    outcome = `the daemon exited (${daemonExit})`;
    break;
  }
  last = serverStatus() ?? last;
  const verdict = settled(last);
  if (verdict) {
    outcome = verdict;
    break;
  }
  await sleep(50);
}
// A mirror also reads: read the first mirrored resource through the daemon, so the scenario
// sees a `resources/read` too (its headers are checked like the listing's).
let read = null;
if (outcome === "ok" && last?.resources > 0) {
  const listed = spawnSync(mirror, ["ls", "--json", "--socket", socket], { encoding: "utf8", timeout: 5000 });
  const uri = listed.status === 0 ? parseJson(listed.stdout)?.[0]?.uri : undefined;
  const answer = uri
    ? spawnSync(mirror, ["read", "--json", uri, "--socket", socket], { encoding: "utf8", timeout: 10000 })
    : { status: null, stdout: listed.stdout, stderr: listed.stderr };
  read = { uri, exit: answer.status, stdout: answer.stdout, stderr: answer.stderr };
  if (answer.status !== 0) outcome = "the read failed";
}
await stopDaemon();

console.log(JSON.stringify({ outcome, status: last, read }, null, 2));
console.error(`mirror-client: ${outcome}; the daemon's log follows\n${daemonLog}`);
rmSync(scratch, { recursive: true, force: true });
process.exit(outcome === "ok" ? 0 : 1);
