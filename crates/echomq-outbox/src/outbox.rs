//! [`Outbox`]: the producer's side. Rows go into the caller's transaction;
//! nothing here talks to Valkey.

use std::time::Duration;

use serde::Serialize;
use sqlx::{PgConnection, PgPool, Row};

use crate::error::{Error, Result};
use crate::options::{JobOptions, check_queue};

/// The most rows one [`Outbox::enqueue_bulk`] call inserts.
pub const MAX_BULK_ROWS: usize = 10_000;

/// The outbox: inserts jobs into the `echomq_outbox` table inside the
/// caller's transaction, so a job exists exactly when the transaction
/// that asked for it commits. A [`Relay`](crate::Relay) moves committed
/// rows into echomq.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> echomq_outbox::Result<()> {
/// use echomq_outbox::{JobOptions, Outbox};
///
/// let outbox = Outbox::new();
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO users (email) VALUES ($1)").bind("ada@example.com").execute(&mut *tx).await?;
/// outbox
///     .enqueue(&mut tx, "emails", &serde_json::json!({"to": "ada@example.com"}), &JobOptions::new())
///     .await?;
/// tx.commit().await?; // the row and the job commit together, or neither does
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Outbox {
    // A handle rather than free functions, so options (a schema, a table
    // name) can be added without changing every call.
    _private: (),
}

/// A row the outbox holds for a job: its row id and the job's id in echomq.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxEntry {
    /// The row's id (`echomq_outbox.id`).
    pub row: i64,
    /// The id the job will have in echomq (the caller's, or a fresh UUID).
    pub job_id: String,
}

/// The rows waiting for a relay, as [`Outbox::backlog`] counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Backlog {
    /// Rows waiting to be relayed.
    pub rows: u64,
    /// How long the oldest of them has waited (Postgres's clock); zero when none.
    pub oldest_age: Duration,
    /// Rows a relay set aside as failed ([`Outbox::failed`]).
    pub failed: u64,
}

/// A row a relay could not enqueue for a reason retrying cannot fix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedRow {
    /// The row's id.
    pub row: i64,
    /// Its queue.
    pub queue: String,
    /// Its job id.
    pub job_id: String,
    /// What echomq (or the relay) said.
    pub error: String,
}

const INSERT: &str = "INSERT INTO echomq_outbox (queue, job_id, payload, options, run_at) \
     VALUES ($1, coalesce($2, gen_random_uuid()::text), $3, $4, \
       CASE WHEN $5::bigint IS NOT NULL THEN clock_timestamp() + $5::bigint * interval '1 millisecond' \
            WHEN $6::float8 IS NOT NULL THEN to_timestamp($6::float8 / 1000.0) END) \
     RETURNING id, job_id";

const INSERT_BULK: &str = "INSERT INTO echomq_outbox (queue, job_id, payload, options, run_at) \
     SELECT $1, coalesce(j, gen_random_uuid()::text), p::jsonb, o::jsonb, \
       CASE WHEN d IS NOT NULL THEN clock_timestamp() + d * interval '1 millisecond' \
            WHEN a IS NOT NULL THEN to_timestamp(a / 1000.0) END \
     FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::float8[]) WITH ORDINALITY AS t(j, p, o, d, a, n) \
     ORDER BY n \
     RETURNING id, job_id";

impl Outbox {
    /// The outbox on the `echomq_outbox` table (see the crate's README for its layout).
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies the crate's migrations (sqlx's migrator, its
    /// `_sqlx_migrations` table). An application that runs its own sqlx
    /// migrations on the same database must set `set_ignore_missing(true)`
    /// on its migrator (or copy this crate's `migrations/` into its own
    /// and not call this), since each migrator otherwise refuses the
    /// other's applied versions.
    ///
    /// # Errors
    /// [`Error::Migrate`] when a migration fails or Postgres is unreachable.
    pub async fn migrate(&self, pool: &PgPool) -> Result<()> {
        let mut m = sqlx::migrate!("./migrations");
        // The application's own migrations may share `_sqlx_migrations`.
        m.set_ignore_missing(true);
        m.run(pool).await?;
        Ok(())
    }

    /// Inserts one job for `queue` into the outbox, through `conn` (pass
    /// `&mut tx`, a [`sqlx::Transaction`], so the job commits with the
    /// transaction's other writes). The job reaches echomq once a relay
    /// moves the committed row; a rolled-back row never does.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a bad queue name or option (checked
    /// before anything is sent), [`Error::Encode`] for a payload that is
    /// not JSON, [`Error::Database`] when the insert fails.
    pub async fn enqueue<T: Serialize + ?Sized>(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        payload: &T,
        opts: &JobOptions,
    ) -> Result<OutboxEntry> {
        check_queue(queue)?;
        opts.check()?;
        let payload = serde_json::to_value(payload).map_err(Error::Encode)?;
        let stored = serde_json::to_value(&opts.stored).map_err(Error::Encode)?;
        let (delay, at) = opts.due();
        let row = sqlx::query(INSERT)
            .bind(queue)
            .bind(opts.id.as_deref())
            .bind(sqlx::types::Json(payload))
            .bind(sqlx::types::Json(stored))
            .bind(delay)
            .bind(at)
            .fetch_one(conn)
            .await?;
        let entry = OutboxEntry {
            row: row.try_get(0)?,
            job_id: row.try_get(1)?,
        };
        tracing::debug!(queue, job_id = %entry.job_id, row = entry.row, "job written to the outbox");
        Ok(entry)
    }

    /// Inserts several jobs for `queue` in one statement (1 to
    /// [`MAX_BULK_ROWS`]), answered in order.
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue); every job is checked before anything is sent.
    pub async fn enqueue_bulk<T: Serialize>(
        &self,
        conn: &mut PgConnection,
        queue: &str,
        jobs: &[(T, JobOptions)],
    ) -> Result<Vec<OutboxEntry>> {
        check_queue(queue)?;
        if jobs.is_empty() || jobs.len() > MAX_BULK_ROWS {
            return Err(Error::InvalidOption {
                name: "jobs",
                reason: format!("{} jobs is not within 1..={MAX_BULK_ROWS}", jobs.len()),
            });
        }
        let n = jobs.len();
        let (mut ids, mut payloads, mut stored, mut delays, mut ats) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (payload, opts) in jobs {
            opts.check()?;
            ids.push(opts.id.clone());
            payloads.push(serde_json::to_string(payload).map_err(Error::Encode)?);
            stored.push(serde_json::to_string(&opts.stored).map_err(Error::Encode)?);
            let (d, a) = opts.due();
            delays.push(d);
            ats.push(a);
        }
        let rows = sqlx::query(INSERT_BULK)
            .bind(queue)
            .bind(ids)
            .bind(payloads)
            .bind(stored)
            .bind(delays)
            .bind(ats)
            .fetch_all(conn)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(OutboxEntry {
                    row: r.try_get(0)?,
                    job_id: r.try_get(1)?,
                })
            })
            .collect()
    }

    /// Counts the rows waiting for a relay and the age of the oldest, and
    /// the rows set aside as failed. One scan of the table: poll it every
    /// few seconds, not per request.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn backlog(&self, pool: &PgPool) -> Result<Backlog> {
        let row = sqlx::query(
            "SELECT count(*) FILTER (WHERE failed_at IS NULL), count(*) FILTER (WHERE failed_at IS NOT NULL), \
             coalesce(extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE failed_at IS NULL)), 0)::float8 \
             FROM echomq_outbox",
        )
        .fetch_one(pool)
        .await?;
        let rows: i64 = row.try_get(0)?;
        let failed: i64 = row.try_get(1)?;
        let age: f64 = row.try_get(2)?;
        Ok(Backlog {
            rows: rows.max(0) as u64,
            oldest_age: Duration::try_from_secs_f64(age.max(0.0)).unwrap_or_default(),
            failed: failed.max(0) as u64,
        })
    }

    /// The rows relays set aside as failed (oldest first, at most `limit`,
    /// 1 to 1,000), with the error that stopped each.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a bad limit, [`Error::Database`] when the query fails.
    pub async fn failed(&self, pool: &PgPool, limit: usize) -> Result<Vec<FailedRow>> {
        if !(1..=1000).contains(&limit) {
            return Err(Error::InvalidOption {
                name: "limit",
                reason: format!("{limit} is not within 1..=1000"),
            });
        }
        let rows = sqlx::query(
            "SELECT id, queue, job_id, coalesce(last_error, '') FROM echomq_outbox \
             WHERE failed_at IS NOT NULL ORDER BY id LIMIT $1",
        )
        .bind(limit as i64)
        .fetch_all(pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(FailedRow {
                    row: r.try_get(0)?,
                    queue: r.try_get(1)?,
                    job_id: r.try_get(2)?,
                    error: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// Puts every failed row back in line for the relays (after upgrading
    /// them, or fixing what refused the rows); answers how many.
    ///
    /// # Errors
    /// [`Error::Database`] when the update fails.
    pub async fn retry_failed(&self, pool: &PgPool) -> Result<u64> {
        let done = sqlx::query("UPDATE echomq_outbox SET failed_at = NULL WHERE failed_at IS NOT NULL")
            .execute(pool)
            .await?;
        Ok(done.rows_affected())
    }
}
