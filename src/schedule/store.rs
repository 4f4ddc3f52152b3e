//! Storing schedules in the server: upsert, remove, read and list them
//! ([`Queue::upsert_schedule`], [`Queue::remove_schedule`],
//! [`Queue::schedule`], [`Queue::schedules`]).

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::definition::Schedule;
use super::missed::Missed;
use super::timing::Timing;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::queue::Queue;
use crate::queue::inspect::HashFields;
use crate::store;
use crate::store::schedule_upsert::{Upsert, Upserted};

/// Schedules read per round trip by [`Queue::schedules`].
const LIST_CHUNK: usize = 100;

/// What [`Queue::upsert_schedule`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleStatus {
    /// A new schedule: its first tick is the first one after it was stored.
    Created,
    /// The schedule existed and some value changed. A new expression or
    /// time zone starts now (no tick before the update is taken under it);
    /// a new payload, policy or job option applies from the next tick.
    Updated,
    /// The schedule existed with every value as given: nothing was written
    /// (so every process may upsert its schedules as it starts).
    Unchanged,
}

/// A stored schedule, from [`Queue::schedule`] or [`Queue::schedules`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub cron: String,
    /// Its IANA time zone.
    pub time_zone: String,
    /// The payload (JSON) each job carries.
    pub payload: Vec<u8>,
    /// The jobs' priority.
    pub priority: i8,
    /// The jobs' limits, fixed when the schedule was stored.
    pub limits: Limits,
    /// The jobs' kind ([`Schedule::kind`]), if they have one.
    pub kind: Option<String>,
    /// What it does about missed ticks.
    pub missed: Missed,
    /// How late a tick may be taken and still be on time.
    pub grace: Duration,
    /// When it was created (server ms).
    pub created_ms: u64,
    /// When it was last changed (server ms).
    pub updated_ms: u64,
    /// Every tick at or before this time (server ms) is done: it made its
    /// job, or was passed over as missed, or came before the schedule (or
    /// its expression or zone) was set. No tick at or before it will make
    /// a job.
    pub done_through_ms: u64,
    /// The next tick to be taken: the first after `done_through_ms`
    /// (`None` when none follows).
    pub next_tick_ms: Option<u64>,
    /// Jobs made so far.
    pub jobs: u64,
    /// The latest tick found missed (taken more than `grace` late), if any.
    pub last_missed_ms: Option<u64>,
    /// When it was paused ([`Queue::pause_schedule`]; server ms), while it is.
    pub paused_ms: Option<u64>,
}

impl ScheduleInfo {
    /// Decodes the payload.
    ///
    /// # Errors
    /// [`Error::Decode`] when it does not decode into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|source| Error::Decode {
            id: format!("schedule {}", self.name),
            source,
        })
    }

    /// From a schedule hash; `None` for one without its expression, zone
    /// or last tick (a torn write).
    fn from_fields(name: &str, fields: HashFields) -> Option<ScheduleInfo> {
        let mut info = ScheduleInfo {
            name: name.to_owned(),
            cron: String::new(),
            time_zone: String::new(),
            payload: Vec::new(),
            priority: 0,
            limits: Limits::default(),
            kind: None,
            missed: Missed::default(),
            grace: super::missed::DEFAULT_GRACE,
            created_ms: 0,
            updated_ms: 0,
            done_through_ms: 0,
            next_tick_ms: None,
            jobs: 0,
            last_missed_ms: None,
            paused_ms: None,
        };
        let (mut have_cron, mut have_zone, mut have_last) = (false, false, false);
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        let num = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|s| s.parse::<u64>().ok());
        for (f, v) in fields {
            match f.as_str() {
                "ex" => (info.cron, have_cron) = (text(&v), true),
                "tz" => (info.time_zone, have_zone) = (text(&v), true),
                "p" => info.payload = crate::compression::readable(v, name),
                "pr" => info.priority = text(&v).parse().unwrap_or(0),
                "lm" => info.limits = Limits::decode(&v),
                "kd" => info.kind = Some(text(&v)).filter(|k| !k.is_empty()),
                "mi" => info.missed = Missed::parse(&text(&v)).unwrap_or_default(),
                "gr" => info.grace = num(&v).map_or(info.grace, Duration::from_millis),
                "ct" => info.created_ms = num(&v).unwrap_or(0),
                "ut" => info.updated_ms = num(&v).unwrap_or(0),
                "lt" => (info.done_through_ms, have_last) = (num(&v).unwrap_or(0), true),
                "nj" => info.jobs = num(&v).unwrap_or(0),
                "mt" => info.last_missed_ms = num(&v),
                "ps" => info.paused_ms = num(&v),
                _ => {}
            }
        }
        if !(have_cron && have_zone && have_last) {
            return None;
        }
        info.next_tick_ms = Timing::parse(&info.cron, &info.time_zone)
            .ok()
            .and_then(|t| t.next_after(info.done_through_ms));
        Some(info)
    }
}

impl Queue {
    /// Stores `schedule` in the server with the `payload` each of its jobs
    /// will carry, creating it or updating the schedule of that name, so
    /// every process's schedulers follow it. Idempotent: every process may
    /// upsert the schedules it knows as it starts (an unchanged schedule is
    /// not written, and keeps its place).
    ///
    /// Each tick then becomes exactly one job, with the id
    /// `cron:NAME@TICK` ([`job_id`](super::job_id)), made by whichever
    /// scheduler takes the tick first: the maintenance of every process
    /// whose consumers serve this queue, a [`Scheduler`](super::Scheduler),
    /// or [`run_schedules`](Self::run_schedules). The jobs' limits are the
    /// schedule's, else this handle's [`QueueOptions`](crate::QueueOptions)
    /// now; the payload is checked against its `max_payload_bytes`.
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// use echomq::schedule::Schedule;
    /// let nightly = Schedule::new("nightly-report", "0 30 2 * * *").time_zone("Europe/Berlin");
    /// queue.upsert_schedule(&nightly, &serde_json::json!({"report": "sales"})).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad name; [`Error::InvalidOption`] for a
    /// bad expression or time zone (or one with no tick after the server's
    /// now), grace or job option; [`Error::PayloadTooLarge`],
    /// [`Error::Encode`]; server errors. Nothing is stored on an error.
    #[doc(alias = "add_schedule")]
    pub async fn upsert_schedule<T: Serialize + ?Sized>(
        &self,
        schedule: &Schedule,
        payload: &T,
    ) -> Result<ScheduleStatus> {
        let checked = schedule.check()?;
        let payload = self.encode(payload)?;
        let now = self.server_time_ms().await?;
        if checked.timing.next_after(now).is_none() {
            return Err(Error::InvalidOption {
                name: "cron expression",
                reason: format!(
                    "{:?} has no tick after the server's now (a year that has passed, or a date that never comes)",
                    crate::error::excerpt(&schedule.cron)
                ),
            });
        }
        let limits = schedule.limits(&self.options().limits);
        let upsert = Upsert {
            name: &schedule.name,
            cron: &schedule.cron,
            zone: &schedule.time_zone,
            payload: &payload,
            priority: schedule.priority,
            limits: &limits,
            missed: schedule.missed.as_str(),
            grace_ms: checked.grace_ms,
            kind: schedule.kind.as_deref(),
        };
        let status = match store::schedule_upsert::run(&mut self.conn(), self.keys(), &upsert).await? {
            Upserted::Created => ScheduleStatus::Created,
            Upserted::Updated => ScheduleStatus::Updated,
            Upserted::Unchanged => return Ok(ScheduleStatus::Unchanged),
        };
        // This process's schedulers look at it at once; others within
        // their look interval.
        self.upkeep().nudge_schedules(self.base());
        Ok(status)
    }

    /// Removes schedule `name`: once this returns, no scheduler makes
    /// another job for it. Jobs it already made stay (cancel or remove them
    /// as any job). Returns whether it existed.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad name; server errors.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool> {
        crate::validate::schedule_name(name)?;
        store::schedule_remove::run(&mut self.conn(), self.keys(), name).await
    }

    /// Pauses schedule `name`: no scheduler makes a job for it until
    /// [`resume_schedule`](Self::resume_schedule) (a pass already under way
    /// makes none either), and it is still listed, with
    /// [`ScheduleInfo::paused_ms`]. Returns whether it was running; an
    /// update of a paused schedule keeps it paused.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad name; [`Error::InvalidOption`] when
    /// there is no such schedule; server errors.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool> {
        self.set_schedule_paused(name, true).await
    }

    /// Resumes schedule `name`: the ticks that passed while it was paused
    /// are skipped (not made up), and the next one after now makes its job.
    /// Returns whether it was paused.
    ///
    /// # Errors
    /// As [`pause_schedule`](Self::pause_schedule).
    pub async fn resume_schedule(&self, name: &str) -> Result<bool> {
        let changed = self.set_schedule_paused(name, false).await?;
        self.upkeep().nudge_schedules(self.base());
        Ok(changed)
    }

    async fn set_schedule_paused(&self, name: &str, paused: bool) -> Result<bool> {
        crate::validate::schedule_name(name)?;
        store::schedule_pause::run(&mut self.conn(), self.keys(), name, paused)
            .await?
            .ok_or_else(|| no_schedule(name))
    }

    /// Enqueues schedule `name`'s job now, outside its ticks: its payload,
    /// priority, limits and kind, under a minted id (a tick's own job,
    /// `cron:NAME@TICK`, is not touched, and the schedule's ticks go on as
    /// before). Works on a paused schedule too.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad name; [`Error::InvalidOption`] when
    /// there is no such schedule; the enqueue's errors.
    pub async fn run_schedule_now(&self, name: &str) -> Result<crate::job::Enqueued> {
        let s = self.schedule(name).await?.ok_or_else(|| no_schedule(name))?;
        let payload = serde_json::value::RawValue::from_string(String::from_utf8_lossy(&s.payload).into_owned())
            .map_err(|source| Error::Decode {
                id: format!("schedule:{name}"),
                source,
            })?;
        let mut opts = crate::job::EnqueueOptions::new()
            .priority(s.priority)
            .max_attempts(s.limits.max_attempts)
            .max_stalls(s.limits.max_stalls)
            .backoff(s.limits.backoff);
        if let Some(t) = s.limits.timeout {
            opts = opts.timeout(t);
        }
        if let Some(k) = &s.kind {
            opts = opts.kind(k.clone());
        }
        self.enqueue_with(&payload, &opts).await
    }

    /// Reads schedule `name`; `None` when there is none.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad name; server errors.
    pub async fn schedule(&self, name: &str) -> Result<Option<ScheduleInfo>> {
        crate::validate::schedule_name(name)?;
        let fields: HashFields = redis::cmd("HGETALL")
            .arg(self.keys().schedule(name))
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        Ok(ScheduleInfo::from_fields(name, fields))
    }

    /// Every schedule of the queue, by name, read a hundred per round trip
    /// (each one as it stood when read).
    ///
    /// ```no_run
    /// # async fn demo(queue: echomq::Queue) -> echomq::Result<()> {
    /// for s in queue.schedules().await? {
    ///     println!("{} {:?} in {}: next tick {:?}, {} jobs", s.name, s.cron, s.time_zone, s.next_tick_ms, s.jobs);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Server errors.
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        let k = self.keys();
        let mut names: Vec<String> = redis::cmd("ZRANGE")
            .arg(&k.schedules)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .map_err(Error::from_redis)?;
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(LIST_CHUNK) {
            let mut pipe = redis::pipe();
            for name in chunk {
                pipe.cmd("HGETALL").arg(k.schedule(name));
            }
            let all: Vec<HashFields> = pipe.query_async(&mut self.conn()).await.map_err(Error::from_redis)?;
            out.extend(
                chunk
                    .iter()
                    .zip(all)
                    .filter_map(|(name, fields)| ScheduleInfo::from_fields(name, fields)),
            );
        }
        Ok(out)
    }
}

/// The error for a schedule that is not there.
fn no_schedule(name: &str) -> Error {
    Error::InvalidOption {
        name: "schedule",
        reason: format!("no schedule {:?} in this queue", crate::error::excerpt(name)),
    }
}
