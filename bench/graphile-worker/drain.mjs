// The graphile-worker baseline of `outbox-bench` (sections `e2e` and `deployed`): how fast
// graphile-worker 0.18 drains N committed jobs with a no-op task, logging off.
//
//   node drain.mjs [--jobs N] [--database NAME] [--preset defaults|performance] [--warm]
//
// Connects with DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres), recreates
// the database NAME (default outbox_bench_gw) for itself and installs graphile-worker's schema
// (runMigrations). N jobs are inserted in one transaction with graphile-worker's own SQL API
// (graphile_worker.add_jobs).
//
// Cold (default): the jobs are committed first, then one worker pool is started and timed from
// its start call until the job table is empty.
// Warm (--warm): the worker pool is started first and left until it is idle (listening, its
// first empty fetch done); then the jobs are committed and timed from that COMMIT until the
// N-th job ran and the job table is empty.
//
// Presets:
//   defaults     concurrency 10, everything else graphile-worker's defaults
//   performance  concurrency 24 with the batching settings of graphile-worker's performance
//                docs (https://worker.graphile.org/docs/performance#batching), given as
//                `preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0 } }`
//                (0.18 reads both from the resolved preset: dist/main.js)
//
// Prints one JSON line on stdout:
//   {"baseline":"graphile-worker","version":"0.18.0","preset":"defaults","warm":false,
//    "jobs":N,"concurrency":10,"local_queue_size":-1,"complete_job_batch_delay":-1,
//    "local_queue_started":false,"seconds":S,"jobs_per_second":R,"first_job_ms":F,
//    "cpu_us_per_job":C,"postgres_cpu_us_per_job":P,"wal_bytes_per_job":W}
// cpu_us_per_job is this node process's CPU (process.cpuUsage(), user + system) over the timed
// window per job; postgres_cpu_us_per_job is that of every `postgres` process on the machine
// (from /proc, null where /proc is missing); wal_bytes_per_job is the WAL the server wrote over
// the window per job (its insert position, as outbox-bench reads it for the host). Anything else goes to stderr. Exits non-zero on any
// failure (never prints a figure then).

import { EventEmitter } from "node:events";
import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";
import { Logger, run, runMigrations } from "graphile-worker";

const PRESETS = {
  defaults: { concurrency: 10, preset: undefined },
  performance: {
    concurrency: 24,
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0 } },
  },
};

function parseArgs(argv) {
  const args = { jobs: 20000, database: "outbox_bench_gw", preset: "defaults", warm: false };
  for (let i = 0; i < argv.length; i++) {
    const value = argv[i + 1];
    switch (argv[i]) {
      case "--jobs":
        args.jobs = Number.parseInt(value, 10);
        i++;
        break;
      case "--database":
        args.database = value;
        i++;
        break;
      case "--preset":
        args.preset = value;
        i++;
        break;
      case "--warm":
        args.warm = true;
        break;
      default:
        throw new Error(
          `unknown argument ${argv[i]} (use --jobs N, --database NAME, --preset defaults|performance, --warm)`,
        );
    }
  }
  if (!Number.isSafeInteger(args.jobs) || args.jobs < 1 || args.jobs > 10_000_000) {
    throw new Error("--jobs must be an integer from 1 to 10000000");
  }
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(args.database ?? "")) {
    throw new Error("--database must be a lowercase SQL identifier");
  }
  if (!Object.hasOwn(PRESETS, args.preset)) {
    throw new Error("--preset must be defaults or performance");
  }
  return args;
}

function withDatabase(url, database) {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

async function recreateDatabase(adminUrl, database) {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${database}`);
  } finally {
    await admin.end();
  }
}

// Insert `jobs` jobs in one transaction; `beforeCommit` runs just before the COMMIT is sent.
async function insertJobs(connectionString, jobs, { vacuum, beforeCommit = async () => {} }) {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query("BEGIN");
    await client.query(
      `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
         SELECT json_populate_record(NULL::graphile_worker.job_spec,
                  json_build_object('identifier', 'noop', 'payload', json_build_object('i', g)))
         FROM generate_series(1, $1::int) g))`,
      [jobs],
    );
    await beforeCommit(client);
    await client.query("COMMIT");
    if (vacuum) await client.query("VACUUM ANALYZE graphile_worker._private_jobs");
  } finally {
    await client.end();
  }
}

// The server's WAL insert position in bytes, through `client` (a pg Client or Pool).
async function walInsertPosition(client) {
  const { rows } = await client.query(
    "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::float8 AS bytes",
  );
  return Number(rows[0].bytes);
}

// CPU seconds (user + system) used so far by every process named `name`, from /proc; null
// without /proc.
function cpuSecondsOf(name) {
  let pids;
  try {
    pids = readdirSync("/proc").filter((entry) => /^[0-9]+$/.test(entry));
  } catch {
    return null;
  }
  let ticks = 0;
  for (const pid of pids) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() !== name) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // The process ended while it was read.
    }
  }
  return ticks / 100;
}

function cpuSeconds() {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

async function remainingJobs(pool) {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM graphile_worker.jobs");
  return rows[0].n;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const { concurrency, preset } = PRESETS[args.preset];
  const baseUrl = process.env.DATABASE_URL || "postgres://postgres@127.0.0.1:5432/postgres";
  const connectionString = withDatabase(baseUrl, args.database);
  await recreateDatabase(withDatabase(baseUrl, "postgres"), args.database);

  const logger = new Logger(() => () => {});
  await runMigrations({ connectionString, logger });
  if (!args.warm) await insertJobs(connectionString, args.jobs, { vacuum: true });

  const events = new EventEmitter();
  let done = 0;
  let firstJobAt = null;
  let listening = false;
  let emptyFetches = 0;
  let localQueueStarted = false;
  events.on("job:success", () => {
    done++;
    if (firstJobAt === null) firstJobAt = performance.now();
  });
  events.on("pool:listen:success", () => {
    listening = true;
  });
  events.on("worker:getJob:empty", () => {
    emptyFetches++;
  });
  // Emitted only when the pool runs a local queue: proof the preset's batching took effect.
  events.on("localQueue:init", () => {
    localQueueStarted = true;
  });
  events.on("localQueue:getJobs:complete", () => {
    emptyFetches++;
  });
  const watcher = new pg.Pool({ connectionString, max: 1 });
  let start = performance.now();
  const runner = await run({
    connectionString,
    concurrency,
    noHandleSignals: true,
    logger,
    events,
    taskList: { noop: async () => {} },
    ...(preset === undefined ? {} : { preset }),
  });
  let walBefore = await walInsertPosition(watcher);
  let cpuBefore = cpuSeconds();
  let postgresBefore = cpuSecondsOf("postgres");
  if (args.warm) {
    // Idle: listening for new jobs and at least one fetch found nothing; then a moment more.
    const idleDeadline = performance.now() + 60_000;
    while (!listening || emptyFetches === 0) {
      if (performance.now() > idleDeadline) {
        throw new Error("the worker did not become idle within 60 s");
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
    await insertJobs(connectionString, args.jobs, {
      vacuum: false,
      beforeCommit: async (client) => {
        walBefore = await walInsertPosition(client);
        cpuBefore = cpuSeconds();
        postgresBefore = cpuSecondsOf("postgres");
        start = performance.now();
      },
    });
  }
  // Done when every job has run and graphile-worker has deleted it from its table.
  const deadline = start + 600_000;
  for (;;) {
    if (done >= args.jobs && (await remainingJobs(watcher)) === 0) break;
    if (performance.now() > deadline) {
      throw new Error(`only ${done} of ${args.jobs} jobs ran within 600 s`);
    }
    await new Promise((resolve) => setTimeout(resolve, done >= args.jobs ? 2 : 20));
  }
  const seconds = (performance.now() - start) / 1000;
  const cpu = cpuSeconds() - cpuBefore;
  const postgresAfter = cpuSecondsOf("postgres");
  const walAfter = await walInsertPosition(watcher);
  await runner.stop();
  await watcher.end();
  const { version } = JSON.parse(
    readFileSync(new URL("./node_modules/graphile-worker/package.json", import.meta.url), "utf8"),
  );
  process.stdout.write(
    `${JSON.stringify({
      baseline: "graphile-worker",
      version,
      preset: args.preset,
      warm: args.warm,
      jobs: args.jobs,
      concurrency,
      local_queue_size: preset?.worker?.localQueue?.size ?? -1,
      complete_job_batch_delay: preset?.worker?.completeJobBatchDelay ?? -1,
      local_queue_started: localQueueStarted,
      seconds,
      jobs_per_second: args.jobs / seconds,
      first_job_ms: firstJobAt === null ? null : firstJobAt - start,
      cpu_us_per_job: (cpu * 1e6) / args.jobs,
      postgres_cpu_us_per_job:
        postgresBefore === null || postgresAfter === null
          ? null
          : ((postgresAfter - postgresBefore) * 1e6) / args.jobs,
      wal_bytes_per_job: (walAfter - walBefore) / args.jobs,
    })}\n`,
  );
}

main().catch((error) => {
  process.stderr.write(`graphile-worker baseline failed: ${error?.stack ?? error}\n`);
  process.exit(1);
});
