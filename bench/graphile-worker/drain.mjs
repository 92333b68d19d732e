// The graphile-worker baseline of `outbox-bench` (section `e2e`): how fast graphile-worker 0.18
// drains N committed jobs with a no-op task, concurrency 10, logging off.
//
//   node drain.mjs [--jobs N] [--database NAME]
//
// Connects with DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres), recreates
// the database NAME (default outbox_bench_gw) for itself, installs graphile-worker's schema
// (runMigrations), inserts N jobs in one transaction with graphile-worker's own SQL API
// (graphile_worker.add_jobs), then starts one worker pool and times it from start until the job
// table is empty. Prints one JSON line on stdout:
//   {"baseline":"graphile-worker","version":"0.18.0","jobs":N,"concurrency":10,
//    "seconds":S,"jobs_per_second":R,"first_job_ms":F}
// Anything else goes to stderr. Exits non-zero on any failure (never prints a figure then).

import { EventEmitter } from "node:events";
import { readFileSync } from "node:fs";
import pg from "pg";
import { Logger, run, runMigrations } from "graphile-worker";

const CONCURRENCY = 10;

function parseArgs(argv) {
  const args = { jobs: 20000, database: "outbox_bench_gw" };
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
      default:
        throw new Error(`unknown argument ${argv[i]} (use --jobs N, --database NAME)`);
    }
  }
  if (!Number.isSafeInteger(args.jobs) || args.jobs < 1 || args.jobs > 10_000_000) {
    throw new Error("--jobs must be an integer from 1 to 10000000");
  }
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(args.database ?? "")) {
    throw new Error("--database must be a lowercase SQL identifier");
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

async function insertJobs(connectionString, jobs) {
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
    await client.query("COMMIT");
    await client.query("VACUUM ANALYZE graphile_worker._private_jobs");
  } finally {
    await client.end();
  }
}

async function remainingJobs(pool) {
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM graphile_worker.jobs");
  return rows[0].n;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const baseUrl = process.env.DATABASE_URL || "postgres://postgres@127.0.0.1:5432/postgres";
  const connectionString = withDatabase(baseUrl, args.database);
  await recreateDatabase(withDatabase(baseUrl, "postgres"), args.database);

  const logger = new Logger(() => () => {});
  await runMigrations({ connectionString, logger });
  await insertJobs(connectionString, args.jobs);

  const events = new EventEmitter();
  let done = 0;
  let firstJobAt = null;
  events.on("job:success", () => {
    done++;
    if (firstJobAt === null) firstJobAt = performance.now();
  });
  const watcher = new pg.Pool({ connectionString, max: 1 });
  const start = performance.now();
  const runner = await run({
    connectionString,
    concurrency: CONCURRENCY,
    noHandleSignals: true,
    logger,
    events,
    taskList: { noop: async () => {} },
  });
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
  await runner.stop();
  await watcher.end();
  const { version } = JSON.parse(
    readFileSync(new URL("./node_modules/graphile-worker/package.json", import.meta.url), "utf8"),
  );
  process.stdout.write(
    `${JSON.stringify({
      baseline: "graphile-worker",
      version,
      jobs: args.jobs,
      concurrency: CONCURRENCY,
      seconds,
      jobs_per_second: args.jobs / seconds,
      first_job_ms: firstJobAt === null ? null : firstJobAt - start,
    })}\n`,
  );
}

main().catch((error) => {
  process.stderr.write(`graphile-worker baseline failed: ${error?.stack ?? error}\n`);
  process.exit(1);
});
