//! Work counted, not timed: the WAL PostgreSQL wrote and the commands Redis ran over a timed
//! window, per event. CPU seconds on a shared 2-core machine move by a tenth between runs;
//! these counts do not, so they show what a change did to the work each event costs (row
//! versions and index entries written, statements and round trips made) where the timings
//! cannot tell it from the machine's mood.
//!
//! WAL is the server's insert position (`pg_current_wal_insert_lsn`), so it counts every
//! database of the server, the bench's own few polling queries included, and the full-page
//! images a checkpoint in the window adds. Redis commands come from `INFO commandstats` of the
//! server the bench's connection reaches (on a Redis Cluster, one node): the commands a script
//! runs are counted too, and the scripts themselves (`EVALSHA`, `FCALL`, ...) apart.

use anyhow::Context as _;
use outbox_host::numeric;
use outbox_host::redis_conn::RedisConn;
use sqlx::PgPool;

/// Commands of `INFO commandstats` that run a script.
const SCRIPT_COMMANDS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Counters at one moment, or their growth per event over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Work {
    /// WAL bytes PostgreSQL wrote.
    pub(crate) wal_bytes: f64,
    /// Commands Redis ran, a script's own commands included.
    pub(crate) redis_commands: f64,
    /// Of those, script calls.
    pub(crate) redis_scripts: f64,
}

impl Work {
    /// The counters now.
    pub(crate) async fn now(pool: &PgPool, redis: &mut RedisConn) -> anyhow::Result<Self> {
        let wal_bytes: f64 =
            sqlx::query_scalar("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::float8")
                .fetch_one(pool)
                .await
                .context("read PostgreSQL's WAL insert position")?;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(redis)
            .await
            .context("read Redis's INFO commandstats")?;
        let (redis_commands, redis_scripts) = command_counts(&stats);
        Ok(Self {
            wal_bytes,
            redis_commands,
            redis_scripts,
        })
    }

    /// Growth per event since `before`, over `n` events.
    pub(crate) fn per_event_since(self, before: Self, n: i64) -> Self {
        let n = numeric::signed_figure(n).max(1.0);
        Self {
            wal_bytes: (self.wal_bytes - before.wal_bytes) / n,
            redis_commands: (self.redis_commands - before.redis_commands) / n,
            redis_scripts: (self.redis_scripts - before.redis_scripts) / n,
        }
    }
}

/// Calls of every command, and of the script commands, in an `INFO commandstats` reply
/// (`cmdstat_<name>:calls=<n>,usec=...` lines; subcommands as `<name>|<sub>`).
fn command_counts(stats: &str) -> (f64, f64) {
    let (mut all, mut scripts) = (0u64, 0u64);
    for line in stats.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let Some(calls) = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|c| c.parse::<u64>().ok())
        else {
            continue;
        };
        all += calls;
        if SCRIPT_COMMANDS.contains(&name) {
            scripts += calls;
        }
    }
    (numeric::figure(all), numeric::figure(scripts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_lines_are_summed_with_scripts_apart() {
        let stats = "# Commandstats\r\ncmdstat_set:calls=120,usec=5,usec_per_call=0.04,rejected_calls=0,failed_calls=0\r\ncmdstat_evalsha:calls=4,usec=9,usec_per_call=2.25\r\ncmdstat_xinfo|groups:calls=2,usec=1\r\nnot a stat line\r\ncmdstat_get:usec=3\r\n";
        assert_eq!(command_counts(stats), (126.0, 4.0));
    }

    #[test]
    fn growth_is_per_event() {
        let before = Work {
            wal_bytes: 1000.0,
            redis_commands: 10.0,
            redis_scripts: 1.0,
        };
        let after = Work {
            wal_bytes: 5000.0,
            redis_commands: 50.0,
            redis_scripts: 5.0,
        };
        assert_eq!(
            after.per_event_since(before, 4),
            Work {
                wal_bytes: 1000.0,
                redis_commands: 10.0,
                redis_scripts: 1.0,
            }
        );
    }
}
