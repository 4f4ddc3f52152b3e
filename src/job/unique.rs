//! Unique lifetimes: how long a job with a dedup id keeps other enqueues
//! with that id out ([`Unique`], given to [`EnqueueOptions::unique`]).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::job::JobState;

/// How long a job enqueued with a dedup id holds it: while it holds, an
/// enqueue with the same id answers
/// [`EnqueueStatus::Deduplicated`](crate::EnqueueStatus::Deduplicated)
/// with the holder's id and writes nothing; once it no longer holds, the
/// next enqueue with the id makes a new job, which takes the id over.
///
/// | mode | the first job holds the id while | after that |
/// | --- | --- | --- |
/// | [`until_finished`](Self::until_finished) (= [`dedup`](crate::EnqueueOptions::dedup)) | it is pending, delayed or active | released when it finishes |
/// | [`for_period(d)`](Self::for_period) (= [`dedup_for`](crate::EnqueueOptions::dedup_for)) | `d` has not passed since the enqueue, whatever its state, even once its record is deleted | the marker expires |
/// | [`until_started`](Self::until_started) | it waits to start: pending or delayed (a retry's wait included) | a start ends it |
/// | [`while_running`](Self::while_running) | it is active | it holds nothing while it waits or once finished |
/// | [`by_states(s)`](Self::by_states) | its state is one of `s` (finished states included) | a job whose record is gone holds nothing |
///
/// [`within(d)`](Self::within) bounds any state mode by a period from the
/// enqueue that took the id. The state modes are decided when the next
/// enqueue looks, from the holder's state then (one read of its record,
/// only for an enqueue that finds the id taken): nothing is written when
/// the holder moves on, so a job of [`until_started`](Self::until_started)
/// that goes back to waiting for a retry holds the id again, unless
/// another job took it meanwhile.
///
/// ```
/// use std::time::Duration;
/// use echomq::{EnqueueOptions, JobState, Unique};
/// // One pending sync per account; a new one may queue behind a running one.
/// let opts = EnqueueOptions::new().unique("sync:acct-9", Unique::until_started());
/// // One invoice run per customer per day, even after it completed.
/// let daily = Unique::by_states(&[JobState::Pending, JobState::Delayed, JobState::Active, JobState::Completed])
///     .within(Duration::from_secs(86_400));
/// let opts = EnqueueOptions::new().unique("invoice:cust-4:2026-12-04", daily);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unique(Mode);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The marker stands until the job finishes (the job's `dd`).
    UntilFinished,
    /// The marker stands for the period, whatever happens to the job.
    Period(Duration),
    /// The marker holds while the holder's state is in the set (bit
    /// `state_bit`), for at most the period.
    States { states: u8, period: Option<Duration> },
}

/// The letters lua/lib/keyspace.lua `STATE_LETTER` gives each state, in
/// [`JobState::ALL`]'s order.
const LETTERS: [(JobState, char); 7] = [
    (JobState::Pending, 'p'),
    (JobState::Delayed, 'd'),
    (JobState::Active, 'a'),
    (JobState::Completed, 'c'),
    (JobState::Failed, 'f'),
    (JobState::Cancelled, 'x'),
    (JobState::Expired, 'e'),
];

impl Unique {
    /// The letter a by-states marker writes for `state`.
    pub(crate) fn letter(state: JobState) -> char {
        LETTERS.iter().find(|(s, _)| *s == state).map_or('?', |(_, c)| *c)
    }
}

fn state_bit(state: JobState) -> u8 {
    let i = LETTERS.iter().position(|(s, _)| *s == state).unwrap_or(0);
    1 << i
}

const WAITING: u8 = 0b11;
const UNFINISHED: u8 = 0b111;

impl Unique {
    /// While the job is pending, delayed or active; its finish releases the
    /// id. What [`EnqueueOptions::dedup`](crate::EnqueueOptions::dedup) gives.
    pub fn until_finished() -> Self {
        Unique(Mode::UntilFinished)
    }

    /// For `period` from the enqueue, whatever happens to the job (its
    /// record may be gone): what [`EnqueueOptions::dedup_for`](crate::EnqueueOptions::dedup_for)
    /// gives. At least 1 ms, at most [`MAX_DELAY`](crate::limits::MAX_DELAY).
    pub fn for_period(period: Duration) -> Self {
        Unique(Mode::Period(period))
    }

    /// Until a worker starts the job: while it is pending or delayed
    /// (including while it waits for a retry, if no other job took the id
    /// meanwhile). A running job does not keep a new one out.
    pub fn until_started() -> Self {
        Unique(Mode::States {
            states: WAITING,
            period: None,
        })
    }

    /// While the job is active (leased to a worker): at most one running
    /// at a time, any number waiting.
    pub fn while_running() -> Self {
        Unique(Mode::States {
            states: state_bit(JobState::Active),
            period: None,
        })
    }

    /// While the job's state is one of `states`, finished states included
    /// (a job whose record retention deleted holds nothing). An empty set
    /// is refused at enqueue.
    pub fn by_states(states: &[JobState]) -> Self {
        Unique(Mode::States {
            states: states.iter().fold(0, |m, s| m | state_bit(*s)),
            period: None,
        })
    }

    /// At most `period` from the enqueue that took the id (at least 1 ms,
    /// at most [`MAX_DELAY`](crate::limits::MAX_DELAY)), besides the mode's own rule.
    /// [`until_finished`](Self::until_finished) becomes "until finished,
    /// for at most `period`"; [`for_period`](Self::for_period) takes the
    /// new period.
    pub fn within(self, period: Duration) -> Self {
        Unique(match self.0 {
            Mode::UntilFinished => Mode::States {
                states: UNFINISHED,
                period: Some(period),
            },
            Mode::Period(_) => Mode::Period(period),
            Mode::States { states, .. } => Mode::States {
                states,
                period: Some(period),
            },
        })
    }

    /// The states in which the holder keeps the id, for the state modes
    /// (`None` for [`until_finished`](Self::until_finished) and
    /// [`for_period`](Self::for_period), which do not look at the holder).
    pub fn states(&self) -> Option<Vec<JobState>> {
        match self.0 {
            Mode::States { states, .. } => Some(
                LETTERS
                    .iter()
                    .filter(|(s, _)| states & state_bit(*s) != 0)
                    .map(|(s, _)| *s)
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The period bounding the id's hold, if any.
    pub fn period(&self) -> Option<Duration> {
        match self.0 {
            Mode::UntilFinished => None,
            Mode::Period(p) => Some(p),
            Mode::States { period, .. } => period,
        }
    }

    /// As enqueue.lua takes the mode: the marker's TTL in ms (0: none) and
    /// the state letters ("" for the two modes that do not look at the
    /// holder). Refuses an empty state set and a period out of range.
    pub(crate) fn encode(&self) -> Result<(u64, String)> {
        // dedup_for's TTL keeps the name it has always had in errors
        let name = if matches!(self.0, Mode::Period(_)) {
            "dedup ttl"
        } else {
            "unique period"
        };
        let ttl = match self.period() {
            None => 0,
            Some(p) => {
                let ms = crate::job::delay_ms(name, p)?;
                if ms == 0 {
                    return Err(Error::InvalidOption {
                        name,
                        reason: "must be at least 1 ms (use dedup() for a marker that stands until the job finishes)"
                            .into(),
                    });
                }
                ms
            }
        };
        let letters = match self.0 {
            Mode::States { states: 0, .. } => {
                return Err(Error::InvalidOption {
                    name: "unique states",
                    reason: "name at least one state in which the job keeps the id".into(),
                });
            }
            Mode::States { states, .. } => LETTERS
                .iter()
                .filter(|(s, _)| states & state_bit(*s) != 0)
                .map(|(_, c)| *c)
                .collect(),
            _ => String::new(),
        };
        Ok((ttl, letters))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::MAX_DELAY;

    // The scripts name states by the same letters.
    #[test]
    fn letters_match_the_scripts() {
        let lua = include_str!("../../lua/lib/keyspace.lua");
        let table = &lua[lua
            .find("local STATE_LETTER = {")
            .expect("STATE_LETTER in keyspace.lua")..];
        let table = &table[..table.find('}').unwrap()];
        for (state, letter) in LETTERS {
            let pair = format!("{} = '{letter}'", state.as_str());
            assert!(table.contains(&pair), "keyspace.lua STATE_LETTER lacks {pair}");
        }
        assert_eq!(table.matches(" = '").count(), LETTERS.len());
    }

    #[test]
    fn modes_encode_as_the_script_takes_them() {
        assert_eq!(Unique::until_finished().encode().unwrap(), (0, String::new()));
        assert_eq!(
            Unique::for_period(Duration::from_secs(2)).encode().unwrap(),
            (2_000, String::new())
        );
        assert_eq!(Unique::until_started().encode().unwrap(), (0, "pd".into()));
        assert_eq!(Unique::while_running().encode().unwrap(), (0, "a".into()));
        assert_eq!(
            Unique::until_finished()
                .within(Duration::from_millis(5))
                .encode()
                .unwrap(),
            (5, "pda".into())
        );
        let all = Unique::by_states(&JobState::ALL);
        assert_eq!(all.encode().unwrap(), (0, "pdacfxe".into()));
        assert_eq!(all.states().unwrap(), JobState::ALL);
        assert!(matches!(
            Unique::by_states(&[]).encode(),
            Err(Error::InvalidOption { .. })
        ));
        assert!(matches!(
            Unique::until_started().within(Duration::ZERO).encode(),
            Err(Error::InvalidOption { .. })
        ));
        assert!(matches!(
            Unique::for_period(MAX_DELAY + Duration::from_secs(1)).encode(),
            Err(Error::InvalidOption { .. })
        ));
    }
}
