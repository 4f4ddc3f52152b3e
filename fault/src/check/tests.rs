//! The checker's unit tests: a clean history passes, and each invariant
//! reports the history that breaks it.

use super::*;
use crate::history::Ev;
use crate::state::JobRecord;

/// Tokens as the queue-wide counter mints them: large, and not
/// consecutive for one job (other jobs' claims come in between).
const T1: u64 = 1_764_590_000_000_001;
const T2: u64 = 1_764_590_000_000_038;

fn rec(src: &str, ev: Ev) -> Record {
    Record {
        src: src.into(),
        t: 0,
        ev,
    }
}

fn start(src: &str, role: &str, lease_ms: u64) -> Record {
    rec(
        src,
        Ev::Start {
            role: role.into(),
            pid: 1,
            lease_ms,
            guarded: role == "worker",
        },
    )
}

fn claimed(src: &str, id: &str, token: u64, attempt: u64, at: u64) -> Record {
    rec(
        src,
        Ev::Claimed {
            id: id.into(),
            token,
            attempt,
            deadline_ms: at + 1000,
            server_ms: at,
            lane: None,
        },
    )
}

/// A heartbeat of `src` that moved `id`'s deadline to `deadline_ms`.
fn extended(src: &str, id: &str, token: u64, deadline_ms: u64) -> Record {
    rec(
        src,
        Ev::Extended {
            id: id.into(),
            token,
            deadline_ms,
        },
    )
}

fn effect(src: &str, id: &str, token: u64) -> Vec<Record> {
    vec![
        rec(src, Ev::EffectBegin { id: id.into(), token }),
        rec(
            src,
            Ev::EffectDone {
                id: id.into(),
                token,
                count: 1,
            },
        ),
    ]
}

fn completed(src: &str, id: &str, token: u64, at: u64) -> Vec<Record> {
    vec![
        rec(
            src,
            Ev::SettleSent {
                id: id.into(),
                token,
                op: "complete".into(),
            },
        ),
        rec(
            src,
            Ev::Settled {
                id: id.into(),
                token,
                op: "complete".into(),
                outcome: "completed".into(),
                server_ms: at,
            },
        ),
    ]
}

fn enqueued(id: &str, dedup: Option<&str>, ms: u64) -> Vec<Record> {
    vec![
        rec(
            "p1",
            Ev::EnqueueInvoke {
                id: id.into(),
                dedup: dedup.map(Into::into),
            },
        ),
        rec(
            "p1",
            Ev::EnqueueOk {
                id: id.into(),
                status: "created".into(),
                job: id.into(),
                ms,
            },
        ),
    ]
}

fn reap(id: &str, at: u64, stalls: u64) -> Record {
    rec(
        "r1",
        Ev::Reap {
            server_ms: at,
            requeued: vec![(id.into(), stalls)],
            failed: vec![],
            cancelled: vec![],
            ms: 1,
        },
    )
}

fn kill(target: &str) -> Record {
    rec(
        "driver",
        Ev::Fault {
            kind: "kill_worker".into(),
            target: target.into(),
            detail: String::new(),
        },
    )
}

/// j1 enqueued, claimed by w1 at 1000, effect, completed at 1500.
fn good() -> (Vec<Record>, ServerState) {
    let mut h = vec![
        start("p1", "producer", 0),
        start("w1", "worker", 1000),
        start("w2", "worker", 1000),
    ];
    h.extend(enqueued("j1", None, 3));
    h.push(claimed("w1", "j1", T1, 1, 1000));
    h.extend(effect("w1", "j1", T1));
    h.extend(completed("w1", "j1", T1, 1500));
    let mut st = ServerState::default();
    st.jobs.insert(
        "j1".into(),
        JobRecord {
            state: "completed".into(),
            attempts: 1,
            token: T1,
            created_ms: 900,
            finished_ms: Some(1500),
            last_op: Some(format!("c:{T1}")),
            settlements: vec![format!("c:{T1}")],
            ..JobRecord::default()
        },
    );
    for s in crate::state::SETS {
        st.sets.insert(s.into(), BTreeMap::new());
    }
    st.sets.get_mut("completed").unwrap().insert("j1".into(), 1500.0);
    st.effects.insert("j1".into(), 1);
    st.guarded.insert("j1".into(), 1);
    (h, st)
}

/// j1's first attempt (w1) did its effect and died; w2 redid it after a reap.
fn redelivered(killed: bool) -> (Vec<Record>, ServerState) {
    let (mut h, mut st) = good();
    h.retain(|r| !matches!(&r.ev, Ev::SettleSent { .. } | Ev::Settled { .. }));
    if killed {
        h.push(kill("w1"));
    }
    h.push(reap("j1", 2100, 1));
    h.push(claimed("w2", "j1", T2, 2, 2200));
    h.extend(effect("w2", "j1", T2));
    h.extend(completed("w2", "j1", T2, 2300));
    let j = st.jobs.get_mut("j1").unwrap();
    (j.attempts, j.token, j.stalls) = (2, T2, 1);
    j.last_op = Some(format!("c:{T2}"));
    j.settlements = vec![format!("c:{T2}")];
    st.effects.insert("j1".into(), 2);
    (h, st)
}

fn violations(h: &[Record], st: &ServerState) -> Vec<String> {
    check(h, st, &CheckOptions::default()).violations
}

fn assert_violates(h: &[Record], st: &ServerState, inv: &str) {
    let v = violations(h, st);
    assert!(
        v.iter().any(|x| x.starts_with(inv)),
        "expected a {inv} violation, got {v:?}"
    );
}

// A clean single delivery passes every invariant, with the figures it implies.
#[test]
fn clean_history_passes() {
    let (h, st) = good();
    let r = check(&h, &st, &CheckOptions::default());
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!((r.jobs, r.completed, r.claims, r.redeliveries, r.lost), (1, 1, 1, 0, 0));
    assert_eq!(r.invariants["I1"], "full");
}

// I1: an acknowledged enqueue whose job is gone is a loss.
#[test]
fn i1_lost_job() {
    let (h, mut st) = good();
    st.jobs.clear();
    st.sets.get_mut("completed").unwrap().clear();
    let r = check(&h, &st, &CheckOptions::default());
    assert_eq!(r.lost, 1);
    assert!(r.violations.iter().any(|v| v.starts_with("I1")));
}

/// The driver's record of a master SIGKILLed at `t`.
fn master_killed(t: u64) -> Record {
    Record {
        src: "driver".into(),
        t,
        ev: Ev::Fault {
            kind: "kill_server".into(),
            target: "7000".into(),
            detail: "SIGKILL".into(),
        },
    }
}

// I1 with a loss window (enqueues without WAIT, masters killed): a job
// acknowledged shortly before a master's SIGKILL and gone is counted, not a
// violation; one acknowledged long before the kill, or after it, is lost.
#[test]
fn i1_loss_window() {
    let (mut h, mut st) = good();
    st.jobs.clear();
    st.sets.get_mut("completed").unwrap().clear();
    for r in h.iter_mut() {
        r.t = 10_000;
    }
    let kill = master_killed;
    let opts = CheckOptions {
        loss_window_ms: Some(1000),
        ..CheckOptions::default()
    };
    let mut within = h.clone();
    within.push(kill(10_400));
    let r = check(&within, &st, &opts);
    assert_eq!((r.lost, r.lost_unconfirmed), (0, 1));
    assert!(!r.violations.iter().any(|v| v.starts_with("I1")), "{:?}", r.violations);
    for t in [12_000, 9_000] {
        let mut outside = h.clone();
        outside.push(kill(t));
        let r = check(&outside, &st, &opts);
        assert_eq!((r.lost, r.lost_unconfirmed), (1, 0), "kill at {t}");
        assert!(r.violations.iter().any(|v| v.starts_with("I1")));
    }
    let r = check(&within, &st, &CheckOptions::default());
    assert_eq!((r.lost, r.lost_unconfirmed), (1, 0), "no window: every loss is one");
}

fn cancel_asked(id: &str, answer: &str, t: u64) -> Record {
    Record {
        src: "p1".into(),
        t,
        ev: Ev::CancelAsked {
            id: id.into(),
            answer: answer.into(),
            ms: 1,
        },
    }
}

/// j2, enqueued and cancelled while it waited: never claimed.
fn cancelled_while_waiting(st: &mut ServerState) -> Vec<Record> {
    let mut h = enqueued("j2", None, 2);
    h.push(cancel_asked("j2", "cancelled", 10_000));
    st.jobs.insert(
        "j2".into(),
        JobRecord {
            state: "cancelled".into(),
            created_ms: 950,
            finished_ms: Some(1000),
            ..JobRecord::default()
        },
    );
    st.sets.get_mut("cancelled").unwrap().insert("j2".into(), 1000.0);
    h
}

// C1 and C2: a cancelled job whose cancel was asked passes; one nobody
// asked to cancel, or one cancelled while waiting that then completed,
// is a violation (the latter counted instead when the cancel was answered
// within the loss window before a master's SIGKILL).
#[test]
fn c1_c2_cancels() {
    let (mut h, mut st) = good();
    h.extend(cancelled_while_waiting(&mut st));
    let r = check(&h, &st, &CheckOptions::default());
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!((r.cancels_asked, r.cancelled), (1, 1));
    // Asked for j1 while it ran, and it completed anyway: fine.
    let mut running = h.clone();
    running.push(cancel_asked("j1", "requested", 10_000));
    assert!(violations(&running, &st).is_empty());

    let unasked: Vec<Record> = h
        .iter()
        .filter(|r| !matches!(r.ev, Ev::CancelAsked { .. }))
        .cloned()
        .collect();
    assert_violates(&unasked, &st, "C1");

    let mut ran = st.clone();
    ran.jobs.get_mut("j2").unwrap().state = "completed".into();
    let c = ran.sets.get_mut("cancelled").unwrap().remove("j2").unwrap();
    ran.sets.get_mut("completed").unwrap().insert("j2".into(), c);
    assert_violates(&h, &ran, "C2");
    let opts = CheckOptions {
        loss_window_ms: Some(1000),
        ..CheckOptions::default()
    };
    let mut killed = h.clone();
    killed.push(master_killed(10_300));
    let r = check(&killed, &ran, &opts);
    assert_eq!(r.cancels_lost_unconfirmed, 1);
    assert!(!r.violations.iter().any(|v| v.starts_with("C2")), "{:?}", r.violations);
}

fn fired(src: &str, t: u64, tick: u64, created: bool) -> Record {
    Record {
        src: src.into(),
        t,
        ev: Ev::Fired {
            schedule: "tick".into(),
            server_ms: tick,
            jobs: vec![(tick, format!("cron:tick@{tick}"), created)],
            missed_ms: None,
        },
    }
}

// K1: a tick's job created by one pass (the other scheduler finding it
// there) passes, and is an enqueue for I1/I2; created by two passes is a
// violation, unless the first was answered within the loss window before
// a master's SIGKILL. A tick's job no recorded pass created is counted.
#[test]
fn k1_one_job_per_tick() {
    let (mut h, mut st) = good();
    let id = "cron:tick@5000";
    let mut j = st.jobs["j1"].clone();
    j.state = "pending".into();
    st.jobs.insert(id.into(), j);
    st.sets.get_mut("pending").unwrap().insert(id.into(), 1.0);
    h.push(fired("s1", 10_000, 5000, true));
    h.push(fired("s2", 10_050, 5000, false));
    let r = check(&h, &st, &CheckOptions::default());
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!((r.cron_jobs_created, r.cron_jobs_unrecorded), (1, 0));

    let mut twice = h.clone();
    twice.push(fired("s2", 10_600, 5000, true));
    assert_violates(&twice, &st, "K1");
    let opts = CheckOptions {
        loss_window_ms: Some(1000),
        ..CheckOptions::default()
    };
    twice.push(master_killed(10_300));
    let r = check(&twice, &st, &opts);
    assert!(!r.violations.iter().any(|v| v.starts_with("K1")), "{:?}", r.violations);

    // Its pass's answer lost: the job is the schedule's, counted, not I2.
    let mut unrecorded = h.clone();
    unrecorded.retain(|r| !matches!(&r.ev, Ev::Fired { jobs, .. } if jobs[0].2));
    let r = check(&unrecorded, &st, &CheckOptions::default());
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!(r.cron_jobs_unrecorded, 1);
    // A job of a schedule no scheduler ran is never enqueued.
    let mut stranger = st.clone();
    let j = stranger.jobs[id].clone();
    stranger.jobs.insert("cron:other@5000".into(), j);
    stranger
        .sets
        .get_mut("pending")
        .unwrap()
        .insert("cron:other@5000".into(), 1.0);
    assert_violates(&h, &stranger, "I2");
}

// I2: a job nobody enqueued is a violation.
#[test]
fn i2_job_never_enqueued() {
    let (h, mut st) = good();
    let j = st.jobs["j1"].clone();
    st.jobs.insert("j9".into(), j);
    st.sets.get_mut("completed").unwrap().insert("j9".into(), 1.0);
    assert_violates(&h, &st, "I2");
}

// I3: a job whose state disagrees with its set, or active after a drain, is a violation.
#[test]
fn i3_state_and_set_disagree() {
    let (h, mut st) = good();
    st.sets.get_mut("pending").unwrap().insert("j1".into(), 1.0);
    assert_violates(&h, &st, "I3");
    let (h, mut st) = good();
    st.jobs.get_mut("j1").unwrap().state = "active".into();
    st.sets.get_mut("completed").unwrap().clear();
    st.sets.get_mut("active").unwrap().insert("j1".into(), 1.0);
    assert_violates(&h, &st, "I3");
}

// I4: completion by a token other than the highest is a violation.
#[test]
fn i4_completed_by_a_stale_token() {
    let (h, mut st) = redelivered(true);
    assert!(violations(&h, &st).is_empty(), "{:?}", violations(&h, &st));
    st.jobs.get_mut("j1").unwrap().last_op = Some(format!("c:{T1}"));
    assert_violates(&h, &st, "I4");
}

// I4: the highest token is the newest claim; a token that does not rise with the delivery number is a violation.
#[test]
fn i4_tokens_rise_with_deliveries() {
    // The second delivery got a lower token than the first.
    let (mut h, mut st) = redelivered(true);
    let low = T1 - 5;
    for r in &mut h {
        match &mut r.ev {
            Ev::Claimed { token, .. }
            | Ev::EffectBegin { token, .. }
            | Ev::EffectDone { token, .. }
            | Ev::SettleSent { token, .. }
            | Ev::Settled { token, .. }
                if *token == T2 =>
            {
                *token = low
            }
            _ => {}
        }
    }
    let j = st.jobs.get_mut("j1").unwrap();
    j.token = low;
    j.last_op = Some(format!("c:{low}"));
    assert_violates(&h, &st, "I4");
    // Two claims with one delivery number (a claim not counted).
    let (mut h, st) = redelivered(true);
    for r in &mut h {
        if let Ev::Claimed { token: T2, attempt, .. } = &mut r.ev {
            *attempt = 1;
        }
    }
    assert_violates(&h, &st, "I4");
    // A claim above the job's current token.
    let (h, mut st) = redelivered(true);
    st.jobs.get_mut("j1").unwrap().token = T1;
    assert_violates(&h, &st, "I4");
}

// I4 and L1 with a claim loss window: a claim recorded shortly before a
// master SIGKILL and never settled may be gone after the failover, so the
// job is claimed again with the same delivery number (counted, not an I4
// violation) and the lost lease counts until the kill only (L1). A kill
// long after the claim, or before it, explains nothing.
#[test]
fn i4_l1_claim_loss_window() {
    // w1 claims j1 at 1000 (recorded at t 10_000) and never settles; the
    // master dies at t 10_300; w2 claims j1 again as delivery 1 at 2200.
    let lost = |kill_at: u64| {
        let (mut h, mut st) = good();
        h.retain(|r| !matches!(&r.ev, Ev::SettleSent { .. } | Ev::Settled { .. }));
        for r in h.iter_mut() {
            r.t = 10_000;
        }
        h.push(master_killed(kill_at));
        let mut again = claimed("w2", "j1", T2, 1, 2200);
        again.t = 12_000;
        h.push(again);
        h.extend(effect("w2", "j1", T2));
        h.extend(completed("w2", "j1", T2, 2300));
        let j = st.jobs.get_mut("j1").unwrap();
        (j.token, j.last_op, j.settlements) = (T2, Some(format!("c:{T2}")), vec![format!("c:{T2}")]);
        st.effects.insert("j1".into(), 2);
        (h, st)
    };
    let windowed = CheckOptions {
        claim_loss_window_ms: Some(1000),
        ..CheckOptions::default()
    };
    let (h, st) = lost(10_300);
    let r = check(&h, &st, &windowed);
    assert!(!r.violations.iter().any(|v| v.starts_with("I4")), "{:?}", r.violations);
    assert_eq!(r.claims_lost_unconfirmed, 1);
    for kill_at in [11_500, 9_000] {
        let (h, st) = lost(kill_at);
        let r = check(&h, &st, &windowed);
        assert!(
            r.violations.iter().any(|v| v.starts_with("I4")),
            "kill at {kill_at}: {:?}",
            r.violations
        );
        assert_eq!(r.claims_lost_unconfirmed, 0);
    }
    let (h, st) = lost(10_300);
    assert_violates(&h, &st, "I4");
    // A settled claim was not lost, whatever the kill.
    let (mut h, st) = lost(10_300);
    h.extend(completed("w1", "j1", T1, 1500));
    assert!(check(&h, &st, &windowed).violations.iter().any(|v| v.starts_with("I4")));

    // L1: three laned jobs claimed 10 ms apart break a cap of 2; when the
    // first claim was lost 5 ms after it (its worker ran on, seen by a
    // heartbeat), only two leases overlap.
    let (mut h, st) = laned(3, |i| 1000 + 10 * i);
    h.retain(|r| !matches!(&r.ev, Ev::Settled { id, .. } if id == "j1"));
    h.push(extended("w1", "j1", T1 + 1, 2050));
    for r in h.iter_mut() {
        r.t = 10_000;
    }
    assert!(
        check(&h, &st, &capped(2))
            .violations
            .iter()
            .any(|v| v.starts_with("L1"))
    );
    h.push(master_killed(10_005));
    let opts = CheckOptions {
        claim_loss_window_ms: Some(1000),
        ..capped(2)
    };
    let r = check(&h, &st, &opts);
    assert!(!r.violations.iter().any(|v| v.starts_with("L1")), "{:?}", r.violations);
}

// I5: a settlement applied with a token after a newer claim (or after its reap) is a violation.
#[test]
fn i5_stale_settle_applied() {
    let (mut h, st) = redelivered(true);
    h.extend(completed("w1", "j1", T1, 2250));
    assert_violates(&h, &st, "I5");
}

// I6: a deadline off the server clock, or a redelivery before the old deadline, is a violation.
#[test]
fn i6_deadline_and_early_redelivery() {
    let (mut h, st) = good();
    if let Ev::Claimed { deadline_ms, .. } = &mut h.iter_mut().find(|r| matches!(r.ev, Ev::Claimed { .. })).unwrap().ev
    {
        *deadline_ms += 3_600_000; // computed from a client clock an hour ahead
    }
    assert_violates(&h, &st, "I6");
    let (mut h, st) = redelivered(true);
    for r in &mut h {
        if let Ev::Claimed {
            token: T2,
            server_ms,
            deadline_ms,
            ..
        } = &mut r.ev
        {
            (*server_ms, *deadline_ms) = (1900, 2900); // before the first delivery's deadline at 2000
        }
    }
    assert_violates(&h, &st, "I6");
}

// I7: a duplicate effect needs a reason; a killed first attempt is one, no reason is a violation.
#[test]
fn i7_duplicate_effects_need_a_reason() {
    let (h, st) = redelivered(true);
    let r = check(&h, &st, &CheckOptions::default());
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!(r.duplicate_effects, 1);
    assert_eq!(r.duplicate_explained["worker killed"], 1);
    let (h, st) = redelivered(false);
    assert_violates(&h, &st, "I7");
    let (h, mut st) = good();
    st.effects.insert("j1".into(), 2);
    assert_violates(&h, &st, "I7");
}

// I8: a guarded effect applied twice is a violation.
#[test]
fn i8_guarded_effect_twice() {
    let (h, mut st) = good();
    st.guarded.insert("j1".into(), 2);
    assert_violates(&h, &st, "I8");
}

// I9: a first reap must count one stall; two reaps of one lease (closer than a lease) are a violation.
#[test]
fn i9_stalls_count_once_per_expiry() {
    let (mut h, st) = redelivered(true);
    h.push(reap("j1", 2101, 2));
    assert_violates(&h, &st, "I9");
    let (mut h, mut st) = redelivered(true);
    for r in &mut h {
        if let Ev::Reap { requeued, .. } = &mut r.ev {
            requeued[0].1 = 0; // the stall was not counted
        }
    }
    st.jobs.get_mut("j1").unwrap().stalls = 0;
    assert_violates(&h, &st, "I9");
}

// I10: two jobs holding one dedup id at once is a violation; one after the other is fine.
#[test]
fn i10_one_job_per_dedup_id() {
    let (mut h, mut st) = good();
    h.extend(enqueued("j2", Some("g"), 2));
    let mut j2 = st.jobs["j1"].clone();
    j2.dedup = Some("g".into());
    j2.created_ms = 1600;
    st.jobs.get_mut("j1").unwrap().dedup = Some("g".into());
    st.jobs.insert("j2".into(), j2.clone());
    st.sets.get_mut("completed").unwrap().insert("j2".into(), 1.0);
    h.retain(|r| !matches!(&r.ev, Ev::EnqueueInvoke { id, .. } if id == "j1"));
    h.extend(enqueued("j1", Some("g"), 2));
    assert!(violations(&h, &st).iter().all(|v| !v.starts_with("I10")));
    st.jobs.get_mut("j2").unwrap().created_ms = 1200; // while j1 still held it
    assert_violates(&h, &st, "I10");
}

// I10: a marker standing for a job that does not exist, or does not name it, blocks its dedup id forever.
#[test]
fn i10_orphaned_markers() {
    let (h, mut st) = good();
    assert!(violations(&h, &st).iter().all(|v| !v.starts_with("I10")));
    st.dedup_markers.insert("lost".into(), "j9".into());
    assert_violates(&h, &st, "I10");
    st.dedup_markers.clear();
    st.dedup_markers.insert("other".into(), "j1".into()); // j1 holds no dedup id
    assert_violates(&h, &st, "I10");
}

/// Jobs j1..jn on lane "a", each claimed at `at(i)` and completed at
/// `at(i) + 100`, all recorded.
fn laned(n: u64, at: impl Fn(u64) -> u64) -> (Vec<Record>, ServerState) {
    let mut h = vec![start("p1", "producer", 0), start("w1", "worker", 1000)];
    let mut st = ServerState::default();
    for s in crate::state::SETS {
        st.sets.insert(s.into(), BTreeMap::new());
    }
    for i in 1..=n {
        let id = format!("j{i}");
        let t = T1 + i;
        h.extend(enqueued(&id, None, 1));
        h.push(rec(
            "w1",
            Ev::Claimed {
                id: id.clone(),
                token: t,
                attempt: 1,
                deadline_ms: at(i) + 1000,
                server_ms: at(i),
                lane: Some("a".into()),
            },
        ));
        h.extend(effect("w1", &id, t));
        h.extend(completed("w1", &id, t, at(i) + 100));
        st.jobs.insert(
            id.clone(),
            JobRecord {
                state: "completed".into(),
                attempts: 1,
                token: t,
                created_ms: 1,
                finished_ms: Some(at(i) + 100),
                last_op: Some(format!("c:{t}")),
                settlements: vec![format!("c:{t}")],
                ..JobRecord::default()
            },
        );
        st.sets.get_mut("completed").unwrap().insert(id.clone(), 1.0);
        st.effects.insert(id.clone(), 1);
        st.guarded.insert(id, 1);
    }
    (h, st)
}

fn capped(cap: u64) -> CheckOptions {
    CheckOptions {
        lane_cap: Some(cap),
        ..CheckOptions::default()
    }
}

// L1: three jobs of a lane active at once break a cap of 2, not a cap of 3; one after another keep a cap of 1.
#[test]
fn l1_lane_cap() {
    let (h, st) = laned(3, |i| 1000 + 10 * i);
    let r = check(&h, &st, &capped(2));
    assert!(r.violations.iter().any(|v| v.starts_with("L1")), "{:?}", r.violations);
    assert_eq!(r.lane_max_active["a"], 3);
    assert!(check(&h, &st, &capped(3)).ok);
    // Each completes (at +100) before the next claim (+100 later): never two at once.
    let (h, st) = laned(3, |i| 1000 + 100 * i);
    let r = check(&h, &st, &capped(1));
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!((r.lane_claims, r.lane_max_active["a"]), (3, 1));
}

// G1: three jobs active at once break a global cap of 2, not of 3.
#[test]
fn g1_global_cap() {
    let (h, st) = laned(3, |i| 1000 + 10 * i);
    let cap = |c| CheckOptions {
        global_cap: Some(c),
        ..CheckOptions::default()
    };
    let r = check(&h, &st, &cap(2));
    assert!(r.violations.iter().any(|v| v.starts_with("G1")), "{:?}", r.violations);
    assert_eq!(r.max_active, 3);
    assert!(check(&h, &st, &cap(3)).ok);
}

// R1/R2: claims 40 ms apart put 3 in a 100 ms window (over a limit of 2), and 2 when 50 ms apart (a claim exactly a window later is in the next window).
#[test]
fn r1_r2_claims_per_window() {
    let rated = |n| CheckOptions {
        rate: Some((n, 100)),
        lane_rate: Some((n, 100)),
        ..CheckOptions::default()
    };
    let (h, st) = laned(4, |i| 1000 + 40 * i);
    let r = check(&h, &st, &rated(2));
    assert!(r.violations.iter().any(|v| v.starts_with("R1")), "{:?}", r.violations);
    assert!(r.violations.iter().any(|v| v.starts_with("R2")), "{:?}", r.violations);
    assert_eq!((r.max_claims_per_window, r.lane_max_claims_per_window["a"]), (3, 3));
    assert!(check(&h, &st, &rated(3)).ok);
    let (h, st) = laned(4, |i| 1000 + 50 * i);
    let r = check(&h, &st, &rated(2));
    assert!(r.ok, "{:?}", r.violations);
    assert_eq!(r.max_claims_per_window, 2);
}

// L1 never reports a lease whose end went unrecorded past the time it was last seen.
#[test]
fn l1_unrecorded_ends_count_until_last_seen() {
    let (mut h, st) = laned(3, |i| 1000 + 10 * i);
    // j1's completion reply was lost: it is surely active only at its claim.
    h.retain(|r| !matches!(&r.ev, Ev::Settled { id, .. } if id == "j1"));
    let r = check(&h, &st, &capped(2));
    assert!(r.violations.iter().all(|v| !v.starts_with("L1")), "{:?}", r.violations);
    // Seen by a heartbeat at 1050 (deadline 2050, lease 1000): active with j2 and j3 then.
    h.push(extended("w1", "j1", T1 + 1, 2050));
    assert!(
        check(&h, &st, &capped(2))
            .violations
            .iter()
            .any(|v| v.starts_with("L1"))
    );
}

// L2: a slot still held, a lane with pending jobs, or a lane left in the ring after a drain is a violation.
#[test]
fn l2_slots_given_back() {
    let (h, st) = laned(2, |i| 1000 + 100 * i);
    assert!(check(&h, &st, &CheckOptions::default()).ok);
    let mut leaked = st.clone();
    leaked.lane_slots.push("a\0j1".into());
    assert_violates(&h, &leaked, "L2");
    let mut ringed = st.clone();
    ringed.lane_ring.insert("a".into(), 2_251_799_813_685_248.0);
    assert_violates(&h, &ringed, "L2");
    let mut unlaned_turn = st;
    unlaned_turn.lane_ring.insert(String::new(), 3.0);
    assert!(check(&h, &unlaned_turn, &CheckOptions::default()).ok);
}

// I11: a call slower than the bound is a violation.
#[test]
fn i11_slow_call() {
    let (mut h, st) = good();
    h.extend(enqueued("j1", None, 60_000));
    assert_violates(&h, &st, "I11");
}
