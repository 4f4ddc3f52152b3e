//! Which of a worker's queues its free lease slots go to: the selection
//! between queues (strict order or weights) and each queue's state (ready,
//! idle until woken, or held until an instant).
//!
//! Weights use stride scheduling: each pick of a queue advances its `pass`
//! by `STRIDE / weight`, and the ready queue with the lowest pass is picked
//! next, so over a backlog each queue's share of picks is its weight over
//! the sum of the weights of the queues with ready work. A pick that leases
//! nothing is given back (its pass steps back), so a queue that ran dry
//! costs the others nothing. A queue that comes back (woken, or its hold
//! over) starts level with the lowest pass of the ready queues, so time
//! spent idle is not banked as a burst that would starve the others.
//!
//! A queue is ready unless it is idle (its last claim came back short; a
//! push to its wake list, or the safety-net poll, makes it ready again) or
//! held (`not_before`: after a failed claim; a "nothing before this
//! instant" hint in a claim reply, such as a rate limit's, is meant to set
//! the same field, leaving `idle_since` alone, so the claim loop sleeps
//! until the hold ends instead of polling and the wake-up does not listen
//! to the queue meanwhile).

use std::time::Duration;

use tokio::time::Instant;

use super::MAX_CLAIM_BATCH;
use crate::validate::later;

/// The pass a pick of weight 1 costs; weights divide it (at most
/// [`MAX_WEIGHT`](super::MAX_WEIGHT), so a stride is never 0).
const STRIDE: u64 = 1 << 20;

/// How the free slots of a worker are shared between its queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Order {
    /// Each queue with ready work gets a share of the slots in proportion
    /// to its weight ([`Worker::queue_weighted`](super::Worker::queue_weighted);
    /// 1 with [`Worker::queue`](super::Worker::queue)). The default.
    #[default]
    Weighted,
    /// The first queue (in the order they were added) with ready work gets
    /// every free slot; the next one is served only when it has none ready.
    /// Weights are ignored.
    Strict,
}

/// One queue's scheduling state.
#[derive(Debug)]
struct QueueState {
    stride: u64,
    /// Stride scheduling's virtual time: the lowest pass goes next.
    pass: u64,
    /// Not claimed from before this instant: a backoff after a failed
    /// claim (and any later "nothing before" hint, such as a rate limit's).
    not_before: Option<Instant>,
    /// Its last claim came back short: it is not claimed from again until
    /// its wake list is pushed, or the safety-net poll picks it.
    idle_since: Option<Instant>,
    /// While idle: a rate limit stopped its last claim and its window
    /// reopens at this instant, so it is claimed from again then, push or
    /// not.
    reopens: Option<Instant>,
    /// Claim failures in a row (the backoff grows with them).
    errors: u32,
    /// Ready at the last refresh (one that was not is brought level when it is again).
    was_ready: bool,
}

/// The scheduling state of all of a worker's queues.
#[derive(Debug)]
pub(super) struct Turns {
    order: Order,
    queues: Vec<QueueState>,
    poll: Duration,
    /// When the last safety-net poll made an idle queue ready.
    last_poll: Instant,
}

/// What the wake-up waits for.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Wait {
    /// The idle queues: a push to their wake list may mean work.
    pub listen: Vec<usize>,
    /// When the safety-net poll is due (`None`: no queue is idle).
    pub poll_at: Option<Instant>,
}

impl Turns {
    /// `weights` in the order the queues were added (1 to `MAX_WEIGHT`).
    pub(super) fn new(order: Order, weights: &[u32], poll: Duration, now: Instant) -> Turns {
        Turns {
            order,
            queues: weights
                .iter()
                .map(|w| QueueState {
                    stride: STRIDE / u64::from((*w).max(1)),
                    pass: 0,
                    not_before: None,
                    idle_since: None,
                    reopens: None,
                    errors: 0,
                    was_ready: true,
                })
                .collect(),
            poll,
            last_poll: now,
        }
    }

    fn ready(&self, q: usize, now: Instant) -> bool {
        let s = &self.queues[q];
        s.idle_since.is_none() && s.not_before.is_none_or(|t| t <= now)
    }

    /// Brings level the queues that are ready again since the last refresh.
    fn refresh(&mut self, now: Instant) {
        let floor = (0..self.queues.len())
            .filter(|&q| self.queues[q].was_ready && self.ready(q, now))
            .map(|q| self.queues[q].pass)
            .min();
        for q in 0..self.queues.len() {
            let ready = self.ready(q, now);
            let s = &mut self.queues[q];
            if ready
                && !s.was_ready
                && let Some(f) = floor
            {
                s.pass = s.pass.max(f);
            }
            s.was_ready = ready;
        }
    }

    /// The next ready queue to pick: the first (strict order), or the one
    /// with the lowest pass not in `full` (weights).
    fn next(&self, now: Instant, full: &[bool]) -> Option<usize> {
        let mut ready = (0..self.queues.len()).filter(|&q| self.ready(q, now));
        match self.order {
            Order::Strict => ready.next(),
            // Ties go to the queue added first.
            Order::Weighted => ready.filter(|&q| !full[q]).min_by_key(|&q| (self.queues[q].pass, q)),
        }
    }

    /// Shares `n` free slots between the ready queues: `(queue, slots)`,
    /// at most [`MAX_CLAIM_BATCH`] each; empty when no queue is ready.
    pub(super) fn plan(&mut self, n: usize, now: Instant) -> Vec<(usize, usize)> {
        self.pick(n, MAX_CLAIM_BATCH, now)
    }

    /// As [`plan`](Self::plan), at most `cap` slots a queue.
    fn pick(&mut self, n: usize, cap: usize, now: Instant) -> Vec<(usize, usize)> {
        self.refresh(now);
        let mut counts = vec![0usize; self.queues.len()];
        let mut full = vec![false; self.queues.len()];
        for _ in 0..n {
            let Some(q) = self.next(now, &full) else { break };
            if full[q] {
                // Strict order: the first ready queue's batch is full; the
                // next queue waits its turn.
                break;
            }
            counts[q] += 1;
            let s = &mut self.queues[q];
            s.pass = s.pass.saturating_add(s.stride);
            full[q] = counts[q] >= cap;
        }
        counts.into_iter().enumerate().filter(|(_, c)| *c > 0).collect()
    }

    /// Of `n` slots freed by settling jobs of queue `q`, how many it should
    /// refill from `q` in the same call (the rest go back to the claim
    /// loop, for the queues the selection gives them to).
    pub(super) fn share(&mut self, q: usize, n: usize, now: Instant) -> usize {
        // One settle call claims as many as it settles (not capped as a
        // plain claim is).
        let plan = self.pick(n, n, now);
        let mut mine = 0;
        for (p, c) in plan {
            if p == q {
                mine = c;
            } else {
                self.give_back(p, c);
            }
        }
        mine
    }

    fn give_back(&mut self, q: usize, picks: usize) {
        let s = &mut self.queues[q];
        s.pass = s.pass.saturating_sub(s.stride.saturating_mul(picks as u64));
    }

    /// A claim of `asked` jobs from `q` leased `got`: short means the queue
    /// ran dry (the claim script then clears its wake list), so it is idle
    /// until woken; the picks that leased nothing are given back. A short
    /// claim that a rate limit stopped says when the limit lets it lease
    /// again (`reopens`): the queue is claimed from then even without a
    /// push. True when the queue went idle just now.
    pub(super) fn claimed(
        &mut self,
        q: usize,
        asked: usize,
        got: usize,
        now: Instant,
        reopens: Option<Instant>,
    ) -> bool {
        self.give_back(q, asked.saturating_sub(got));
        let s = &mut self.queues[q];
        s.errors = 0;
        if got < asked {
            if let Some(at) = reopens {
                s.reopens = Some(s.reopens.map_or(at, |t| t.min(at)));
            }
            if s.idle_since.is_none() {
                s.idle_since = Some(now);
                return true;
            }
        }
        false
    }

    /// A claim from `q` failed: hold it for a backoff that doubles with
    /// each failure in a row (50 ms to 3.2 s); returns the backoff.
    pub(super) fn failed(&mut self, q: usize, asked: usize, now: Instant) -> Duration {
        self.give_back(q, asked);
        let s = &mut self.queues[q];
        s.errors = s.errors.saturating_add(1);
        let pause = Duration::from_millis(50u64 << s.errors.min(6));
        self.hold_until(q, later(now, pause));
        pause
    }

    /// Claims nothing from `q` before `until` (a failed claim's backoff;
    /// a claim reply's "nothing before" hint, such as a rate limit's, goes
    /// here too). The queue is not idle meanwhile: the claim loop sleeps
    /// until the hold ends, and the wake-up does not listen to it.
    pub(super) fn hold_until(&mut self, q: usize, until: Instant) {
        let s = &mut self.queues[q];
        s.not_before = Some(s.not_before.map_or(until, |t| t.max(until)));
    }

    /// A push to `q`'s wake list was seen: it may have work.
    pub(super) fn woken(&mut self, q: usize) {
        self.queues[q].idle_since = None;
        self.queues[q].reopens = None;
    }

    /// The earliest rate-limit reopening of an idle queue.
    fn reopening(&self) -> Option<(usize, Instant)> {
        self.queues
            .iter()
            .enumerate()
            .filter(|(_, s)| s.idle_since.is_some())
            .filter_map(|(q, s)| s.reopens.map(|t| (q, t)))
            .min_by_key(|(q, t)| (*t, *q))
    }

    /// When the next safety-net poll is due: a poll interval after the
    /// last one, and after the oldest idle queue went idle. One idle queue
    /// is polled at a time, so many idle queues cost one claim per poll
    /// interval between them, not one each.
    fn poll_due(&self) -> Option<(usize, Instant)> {
        let (q, since) = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(q, s)| s.idle_since.map(|t| (q, t)))
            .min_by_key(|(q, t)| (*t, *q))?;
        Some((q, later(since.max(self.last_poll), self.poll)))
    }

    /// What the wake-up waits for: the idle queues' wake lists, until the
    /// safety-net poll is due.
    pub(super) fn wait(&self) -> Wait {
        Wait {
            listen: (0..self.queues.len())
                .filter(|&q| self.queues[q].idle_since.is_some())
                .collect(),
            poll_at: [self.poll_due(), self.reopening()]
                .into_iter()
                .flatten()
                .map(|(_, at)| at)
                .min(),
        }
    }

    /// When the earliest hold of a queue not idle ends (the claim loop,
    /// with no queue ready, waits for it or a wake-up).
    pub(super) fn hold_ends(&self, now: Instant) -> Option<Instant> {
        self.queues
            .iter()
            .filter(|s| s.idle_since.is_none())
            .filter_map(|s| s.not_before.filter(|t| *t > now))
            .min()
    }

    /// A wait ended without a push: if the safety-net poll is due, the
    /// queue idle the longest is ready again (true then).
    pub(super) fn timed_out(&mut self, now: Instant) -> bool {
        // Queues whose rate limit reopened: claim from them again.
        let mut reopened = false;
        for s in &mut self.queues {
            if s.idle_since.is_some() && s.reopens.is_some_and(|t| t <= now) {
                s.idle_since = None;
                s.reopens = None;
                reopened = true;
            }
        }
        if reopened {
            return true;
        }
        match self.poll_due() {
            Some((q, at)) if at <= now => {
                self.queues[q].idle_since = None;
                self.last_poll = now;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(plan: &[(usize, usize)], n: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for (q, k) in plan {
            c[*q] += k;
        }
        c
    }

    // Over a backlog, picks follow the weights exactly, one slot at a time too.
    #[test]
    fn weights_share_the_slots() {
        let now = Instant::now();
        let mut s = Turns::new(Order::Weighted, &[1, 2, 4], Duration::from_secs(5), now);
        assert_eq!(counts(&s.plan(70, now), 3), vec![10, 20, 40]);
        let mut total = vec![0; 3];
        for _ in 0..700 {
            for (q, k) in s.plan(1, now) {
                total[q] += k;
            }
        }
        assert_eq!(total, vec![100, 200, 400]);
    }

    // Strict order gives every slot to the first ready queue, the next only once it is idle.
    #[test]
    fn strict_order_serves_the_first_ready_queue() {
        let now = Instant::now();
        let mut s = Turns::new(Order::Strict, &[1, 1], Duration::from_secs(5), now);
        assert_eq!(s.plan(5, now), vec![(0, 5)]);
        s.claimed(0, 5, 2, now, None);
        assert_eq!(s.plan(5, now), vec![(1, 5)]);
        s.woken(0);
        assert_eq!(s.plan(100, now), vec![(0, MAX_CLAIM_BATCH)]);
    }

    // A queue back from idle starts level with the others instead of taking every slot to catch up.
    #[test]
    fn a_queue_back_from_idle_does_not_burst() {
        let now = Instant::now();
        let mut s = Turns::new(Order::Weighted, &[1, 1], Duration::from_secs(5), now);
        s.plan(1, now);
        s.claimed(0, 1, 0, now, None);
        for _ in 0..100 {
            s.plan(1, now);
        }
        s.woken(0);
        assert_eq!(counts(&s.plan(10, now), 2), vec![5, 5]);
    }

    // The settler refills its queue only with the picks the selection gives it; the rest are given back.
    #[test]
    fn the_settler_gets_its_share() {
        let now = Instant::now();
        let mut s = Turns::new(Order::Weighted, &[1, 1, 2], Duration::from_secs(5), now);
        assert_eq!(s.share(2, 8, now), 4);
        // The claim loop's next picks make up the other queues' shares: 1:1:2 in all.
        assert_eq!(counts(&s.plan(8, now), 3), vec![3, 3, 2]);
        // A one-queue worker refills every slot a batch frees, past a claim's cap.
        let mut s = Turns::new(Order::Weighted, &[1], Duration::from_secs(5), now);
        assert_eq!(s.share(0, 200, now), 200);
    }

    // With every queue idle, the wake-up listens on all of them until one safety-net poll, which readies only the oldest.
    #[test]
    fn idle_queues_are_polled_one_at_a_time() {
        let t0 = Instant::now();
        let poll = Duration::from_secs(5);
        let mut s = Turns::new(Order::Weighted, &[1, 1, 1], poll, t0);
        assert!(s.claimed(1, 1, 0, t0, None));
        assert!(s.claimed(0, 1, 0, t0 + Duration::from_millis(1), None));
        assert!(s.claimed(2, 1, 0, t0 + Duration::from_millis(2), None));
        let w = s.wait();
        assert_eq!((w.listen, w.poll_at), (vec![0, 1, 2], Some(t0 + poll)));
        assert!(!s.timed_out(t0 + poll / 2));
        assert!(s.timed_out(t0 + poll));
        assert_eq!(s.wait().listen, vec![0, 2]);
        assert_eq!(s.plan(3, t0 + poll), vec![(1, 3)]);
        s.claimed(1, 3, 0, t0 + poll, None);
        assert_eq!(s.wait().poll_at, Some(t0 + poll + poll));
        // A failed claim holds its queue; the claim loop waits until the hold ends.
        let mut s = Turns::new(Order::Weighted, &[1], poll, t0);
        let pause = s.failed(0, 1, t0);
        assert_eq!(s.plan(1, t0), vec![]);
        assert_eq!(s.hold_ends(t0), Some(t0 + pause));
        assert_eq!(s.plan(1, t0 + pause), vec![(0, 1)]);
    }

    // A queue a rate limit stopped is idle (a push still wakes it) until its window reopens, then claimed from without a push.
    #[test]
    fn a_rate_limited_queue_is_claimed_again_when_its_window_reopens() {
        let t0 = Instant::now();
        let poll = Duration::from_secs(5);
        let w = Duration::from_millis(300);
        let mut s = Turns::new(Order::Weighted, &[1, 1], poll, t0);
        assert!(s.claimed(0, 4, 1, t0, Some(t0 + w)));
        assert!(s.claimed(1, 1, 0, t0, None));
        let wait = s.wait();
        assert_eq!((wait.listen, wait.poll_at), (vec![0, 1], Some(t0 + w)));
        assert!(!s.timed_out(t0 + w / 2));
        assert!(s.timed_out(t0 + w));
        assert_eq!(s.plan(4, t0 + w), vec![(0, 4)], "only the reopened queue");
        // A push before the window reopens clears the reopening.
        assert!(s.claimed(0, 4, 0, t0 + w, Some(t0 + 2 * w)));
        s.woken(0);
        assert_eq!(s.wait().poll_at, Some(t0 + poll));
    }
}
