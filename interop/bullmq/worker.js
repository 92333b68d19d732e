// A BullMQ application as a team runs it, for the outbox host's interop tests: unmodified
// `bullmq` Workers on the given queues, a QueueEvents listener per queue, and a Queue per queue
// to inspect (`getJobCounts`, `getJob`) or to add jobs the way a Node dispatcher would.
//
// Environment: REDIS_URL (redis://host:port/db), BULL_PREFIX (default "bull"), QUEUES (comma-
// separated), CONCURRENCY (default 8), WORKERS ("0": queues only, no Worker and no QueueEvents,
// so that nothing is processed).
//
// The processor throws while `attemptsMade + 1 < payload.fail_until_attempt`, and always when
// `payload.always_fail` is true; otherwise it returns { ok: true }.
//
// Output, one JSON object per line on stdout:
//   {"kind":"ready"}                                   workers and listeners are up
//   {"kind":"processed","queue","id","name","data","attemptsMade"}   each processor call
//   {"kind":"completed"|"failed","queue","id",...}     seen by QueueEvents
//   {"kind":"inspect","queue","counts","jobs"}         answer to an inspect command
//   {"kind":"added","queue","id"}                      answer to an add command
//   {"kind":"paused","queue"}                          answer to a pause command
//   {"kind":"error","message"}                         a command failed
// Commands, one JSON object per line on stdin:
//   {"cmd":"inspect","queue":Q,"ids":[...]}
//   {"cmd":"add","queue":Q,"name":N,"data":D,"jobId":ID} or with "opts":{...} (Queue.add's options)
//   {"cmd":"pause","queue":Q}   {"cmd":"quit"}
'use strict';

const readline = require('node:readline');
const { Queue, QueueEvents, Worker } = require('bullmq');

const url = new URL(process.env.REDIS_URL || 'redis://127.0.0.1:6379/');
const connection = {
  host: url.hostname || '127.0.0.1',
  port: Number(url.port || 6379),
  db: Number((url.pathname || '/').slice(1) || 0),
  maxRetriesPerRequest: null,
};
const prefix = process.env.BULL_PREFIX || 'bull';
const queueNames = (process.env.QUEUES || '').split(',').filter(Boolean);
const concurrency = Number(process.env.CONCURRENCY || 8);
const withWorkers = process.env.WORKERS !== '0';

function emit(object) {
  process.stdout.write(JSON.stringify(object) + '\n');
}

async function main() {
  if (queueNames.length === 0) throw new Error('QUEUES is empty');
  const queues = new Map();
  const closers = [];
  for (const name of queueNames) {
    const queue = new Queue(name, { connection, prefix });
    await queue.waitUntilReady();
    queues.set(name, queue);
    closers.push(() => queue.close());
    if (!withWorkers) continue;
    const events = new QueueEvents(name, { connection, prefix, lastEventId: '0-0' });
    events.on('completed', ({ jobId, returnvalue }) =>
      emit({ kind: 'completed', queue: name, id: jobId, returnvalue }));
    events.on('failed', ({ jobId, failedReason }) =>
      emit({ kind: 'failed', queue: name, id: jobId, failedReason }));
    const worker = new Worker(
      name,
      async (job) => {
        emit({
          kind: 'processed',
          queue: name,
          id: job.id,
          name: job.name,
          data: job.data,
          attemptsMade: job.attemptsMade,
        });
        const payload = (job.data && job.data.payload) || {};
        if (payload.always_fail) throw new Error('planned failure (always_fail)');
        if (payload.fail_until_attempt && job.attemptsMade + 1 < payload.fail_until_attempt) {
          throw new Error(`planned failure on attempt ${job.attemptsMade + 1}`);
        }
        return { ok: true };
      },
      { connection, prefix, concurrency },
    );
    worker.on('error', (e) => emit({ kind: 'error', message: String(e && e.message) }));
    await Promise.all([events.waitUntilReady(), worker.waitUntilReady()]);
    closers.unshift(() => worker.close(), () => events.close());
  }
  emit({ kind: 'ready' });

  const input = readline.createInterface({ input: process.stdin });
  for await (const line of input) {
    if (!line.trim()) continue;
    let command;
    try {
      command = JSON.parse(line);
      const queue = queues.get(command.queue);
      if (command.cmd === 'quit') break;
      if (!queue) throw new Error(`unknown queue ${command.queue}`);
      if (command.cmd === 'inspect') {
        const jobs = {};
        for (const id of command.ids || []) {
          const job = await queue.getJob(id);
          jobs[id] = job && {
            name: job.name,
            data: job.data,
            opts: job.opts,
            attemptsMade: job.attemptsMade,
            state: await job.getState(),
          };
        }
        emit({ kind: 'inspect', queue: command.queue, counts: await queue.getJobCounts(), jobs });
      } else if (command.cmd === 'add') {
        const job = await queue.add(command.name, command.data, command.opts || { jobId: command.jobId });
        emit({ kind: 'added', queue: command.queue, id: job.id });
      } else if (command.cmd === 'pause') {
        await queue.pause();
        emit({ kind: 'paused', queue: command.queue });
      } else {
        throw new Error(`unknown command ${command.cmd}`);
      }
    } catch (e) {
      emit({ kind: 'error', message: String(e && e.message), command });
    }
  }
  for (const close of closers) await close();
  process.exit(0);
}

main().catch((e) => {
  emit({ kind: 'error', message: String(e && e.stack) });
  process.exit(1);
});
