//! Effect markers: which attempt of a job took an effect on, and whether
//! it finished (module docs, section 2).

use std::fmt;
use std::time::Duration;

use super::{DEFAULT_MARKER_TTL, MAX_MARKER_TTL};
use crate::error::{Error, Result};
use crate::job::millis;
use crate::lease::Lease;
use crate::queue::Queue;
use crate::store;
use crate::store::marker_claim::{Found, Marker};
use crate::worker::Job;

/// How often [`EffectMarker::once`] sends a marker call again after a
/// transient failure (the calls are idempotent, so repeating is safe).
const TRANSIENT_TRIES: u32 = 4;

/// What [`EffectMarker::claim`] found. In every state but `Done` the caller
/// now holds the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MarkerState {
    /// No attempt took the effect on before: perform it, then
    /// [`done`](EffectMarker::done). (Also what the holder hears when it
    /// claims again after a fresh claim.)
    Fresh,
    /// The attempt with fencing token `token` finished the effect: skip it.
    Done {
        /// The fencing token of the attempt that marked it done.
        token: u64,
    },
    /// Held by a dead attempt: the attempt with fencing token `token` claimed the marker and ended
    /// (crashed, lost its lease, failed or was released) without marking
    /// it done. The caller holds it now. The effect may or may not have
    /// happened: ask the external system before performing it again.
    Orphaned {
        /// The fencing token of the attempt that held the marker.
        token: u64,
    },
}

/// What [`EffectMarker::once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Once<T> {
    /// The closure ran in this attempt (the marker was fresh or orphaned)
    /// and the marker is marked done.
    Ran(T),
    /// An earlier attempt had finished the effect; the closure did not run.
    Skipped {
        /// The fencing token of the attempt that marked it done.
        token: u64,
    },
}

/// Why [`EffectMarker::once`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OnceError<E> {
    /// The marker could not be claimed, so the effect did not run: this
    /// attempt lost its lease ([`Error::LeaseLost`]), the job is gone, or
    /// the server failed. Also what `?` makes of any other echomq error.
    Claim(Error),
    /// The closure failed. The marker stays held by this attempt, so the
    /// next delivery finds it [`Orphaned`](MarkerState::Orphaned) (call
    /// [`EffectMarker::abandon`] first if the effect surely did not happen).
    Effect(E),
    /// The closure succeeded (the effect happened) but recording it done
    /// failed: a newer attempt took the marker over
    /// ([`Error::MarkerLost`]), or the server stayed unreachable. The next
    /// delivery will find the marker orphaned, or already found it so.
    Unrecorded(Error),
}

impl<E> From<Error> for OnceError<E> {
    fn from(e: Error) -> Self {
        OnceError::Claim(e)
    }
}

impl<E: fmt::Display> fmt::Display for OnceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnceError::Claim(e) => write!(f, "effect not run: {e}"),
            OnceError::Effect(e) => write!(f, "effect failed: {e}"),
            OnceError::Unrecorded(e) => write!(f, "effect ran but was not recorded as done: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for OnceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OnceError::Claim(e) | OnceError::Unrecorded(e) => Some(e),
            OnceError::Effect(_) => None,
        }
    }
}

/// The marker of one effect of one job, as seen by one attempt of it
/// (module docs: "Effect markers"). Cheap to clone; holds a [`Queue`]
/// handle.
#[derive(Debug, Clone)]
pub struct EffectMarker {
    queue: Queue,
    job_id: String,
    /// The job hash: the claim reads its state and attempts (the fence).
    job_key: String,
    /// `PREFIX:{Q}:fx:EFFECT:ID`.
    key: String,
    effect: String,
    /// The calling attempt's fencing token.
    token: u64,
    ttl: Duration,
}

impl EffectMarker {
    /// The marker of effect `effect` of job `job_id` of `queue`, for the
    /// attempt whose fencing token is `token` ([`Job::token`],
    /// [`Lease::token`]). Prefer [`for_job`](Self::for_job) and
    /// [`for_lease`](Self::for_lease), which also check the queue.
    ///
    /// `effect` names the effect within the job ("charge", "welcome-mail"):
    /// 1 to 64 ASCII letters, digits, `-`, `_` or `.`.
    ///
    /// # Errors
    /// [`Error::InvalidId`] for a bad job id or effect name,
    /// [`Error::InvalidOption`] for token 0 (claims never mint it).
    pub fn new(queue: &Queue, job_id: &str, token: u64, effect: &str) -> Result<EffectMarker> {
        crate::validate::id("job id", job_id)?;
        crate::validate::effect_name(effect)?;
        if token == 0 {
            return Err(Error::InvalidOption {
                name: "token",
                reason: "must be a fencing token minted by a claim (never 0)".into(),
            });
        }
        let keys = queue.keys();
        Ok(EffectMarker {
            queue: queue.clone(),
            job_id: job_id.to_owned(),
            job_key: keys.job(job_id),
            key: format!("{}fx:{effect}:{job_id}", keys.base),
            effect: effect.to_owned(),
            token,
            ttl: DEFAULT_MARKER_TTL,
        })
    }

    /// The marker of effect `effect` for this delivery of a consumer's job.
    /// `queue` must be the job's queue (a clone of the consumer's).
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::WrongQueue`] when `queue` is not
    /// the job's queue.
    pub fn for_job<T>(queue: &Queue, job: &Job<T>, effect: &str) -> Result<EffectMarker> {
        Self::for_lease(queue, job.lease(), effect)
    }

    /// The marker of effect `effect` for the attempt holding `lease`
    /// (low-level API).
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::WrongQueue`] when `queue` is not
    /// the queue the lease came from.
    pub fn for_lease(queue: &Queue, lease: &Lease, effect: &str) -> Result<EffectMarker> {
        lease.check_queue(queue.base())?;
        Self::new(queue, lease.id(), lease.token(), effect)
    }

    /// How long the marker stands after each claim or `done` (default
    /// [`DEFAULT_MARKER_TTL`]; 1 ms to 10 years, checked by each call).
    /// Use the same value for every attempt of a job.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The marker's key, `PREFIX:{Q}:fx:EFFECT:ID` (for inspection).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The job id.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The effect name.
    pub fn effect(&self) -> &str {
        &self.effect
    }

    /// The fencing token of the attempt this handle speaks for.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// An idempotency key for this effect of this job, the same on every
    /// delivery: `{QUEUE}:ID:EFFECT`. Use it when a job has several
    /// external effects, each needing its own key.
    pub fn idempotency_key(&self) -> String {
        format!("{}:{}", self.queue.idempotency_key(&self.job_id), self.effect)
    }

    fn ttl_ms(&self) -> Result<u64> {
        let ttl = crate::validate::duration("marker ttl", self.ttl, Duration::from_millis(1), MAX_MARKER_TTL)?;
        millis("marker ttl", ttl)
    }

    /// Claims the marker before the effect. Asking again with the same
    /// attempt answers what the first call answered, so a call whose reply
    /// was lost can be sent again.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when this attempt is not the job's current one
    /// (its lease was reaped, or it settled): do not perform the effect.
    /// [`Error::JobNotFound`]; [`Error::Protocol`] when the marker key holds
    /// a value echomq did not write; server errors.
    pub async fn claim(&self) -> Result<MarkerState> {
        let ttl_ms = self.ttl_ms()?;
        let found = store::marker_claim::run(&mut self.queue.conn(), &self.marker(), ttl_ms).await?;
        Ok(match found {
            Found::Fresh => MarkerState::Fresh,
            Found::Done { token } => MarkerState::Done { token },
            Found::Orphaned { token } => MarkerState::Orphaned { token },
        })
    }

    /// Records that this attempt's effect finished: every later claim
    /// answers [`MarkerState::Done`]. Works after this attempt's lease was
    /// lost too, unless a newer attempt has taken the marker over; a marker
    /// whose TTL ran out is written as done (the effect happened either
    /// way). Marking done again answers `Ok`.
    ///
    /// # Errors
    /// [`Error::MarkerLost`] when a newer attempt took the marker over or
    /// another attempt finished it (nothing changed: the newer holder was
    /// told the effect may have happened); server errors (safe to retry).
    pub async fn done(&self) -> Result<()> {
        let ttl_ms = self.ttl_ms()?;
        store::marker_done::run(&mut self.queue.conn(), &self.marker(), ttl_ms).await
    }

    /// Gives the marker back because the effect surely did not happen (the
    /// API refused the request before acting, say). The next delivery then
    /// finds it [`Fresh`](MarkerState::Fresh) instead of orphaned. Do not
    /// abandon an effect that may have happened.
    ///
    /// # Errors
    /// [`Error::MarkerLost`] when another attempt holds the marker or an
    /// attempt finished the effect (a done marker is never given back);
    /// server errors (safe to retry).
    pub async fn abandon(&self) -> Result<()> {
        store::marker_abandon::run(&mut self.queue.conn(), &self.marker()).await
    }

    /// This handle as the marker scripts take it.
    fn marker(&self) -> Marker<'_> {
        Marker {
            job_id: &self.job_id,
            job_key: &self.job_key,
            key: &self.key,
            effect: &self.effect,
            token: self.token,
        }
    }

    /// Runs `effect` at most once per job, as far as markers can promise
    /// (module docs): claims the marker; if an earlier attempt finished the
    /// effect, returns [`Once::Skipped`] without running it; otherwise runs
    /// `effect` with the claim's state ([`Fresh`](MarkerState::Fresh), or
    /// [`Orphaned`](MarkerState::Orphaned): check the external system
    /// first) and marks the marker done when it returns `Ok`. Marker calls
    /// that fail transiently are sent again a few times (they are
    /// idempotent).
    ///
    /// # Errors
    /// [`OnceError::Claim`]: the effect did not run (stale attempt, server
    /// error). [`OnceError::Effect`]: the closure failed; the marker stays
    /// held, so the next delivery finds it orphaned. [`OnceError::Unrecorded`]:
    /// the effect ran but could not be recorded done.
    pub async fn once<F, Fut, T, E>(&self, effect: F) -> Result<Once<T>, OnceError<E>>
    where
        F: FnOnce(MarkerState) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let state = transient_retry(|| self.claim()).await.map_err(OnceError::Claim)?;
        if let MarkerState::Done { token } = state {
            return Ok(Once::Skipped { token });
        }
        let value = effect(state).await.map_err(OnceError::Effect)?;
        transient_retry(|| self.done()).await.map_err(OnceError::Unrecorded)?;
        Ok(Once::Ran(value))
    }
}

/// Sends `call` again after transient failures, a few times with a short
/// backoff. Only for idempotent calls.
async fn transient_retry<F, Fut, T>(mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(50);
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if e.is_transient() && tries < TRANSIENT_TRIES => {
                tokio::time::sleep(pause).await;
                pause *= 2;
                tries += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Effect names stay inside a safe alphabet without ':', so keys cannot collide.
    #[test]
    fn effect_names_are_checked() {
        for good in ["charge", "welcome-mail", "v1.refund_2"] {
            assert!(crate::validate::effect_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a:b", "sp ace", "ünï", &"x".repeat(65), "{tag}"] {
            assert!(
                matches!(
                    crate::validate::effect_name(bad),
                    Err(Error::InvalidId {
                        what: "effect name",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }
}
