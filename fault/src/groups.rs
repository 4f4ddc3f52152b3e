//! The flows and batches a producer adds (`fault-producer --flows=N
//! --batches=N`), each with a caller-chosen id so that a call whose
//! outcome is unknown is retried safely, and what it records of them
//! for the checker's F and B invariants (`check/groups.rs`).
//!
//! Flow `f{k}` has six steps: two leaves `a` and `b`, `ab` after both, a
//! leaf `c` with two parents, `mid` after `ab` and `c`, and `top` after
//! `mid` and `c` (a diamond and a shared child). Batch `b{k}` has
//! `members` members `b{k}m{j}` and a success and a complete callback.
//! Every step, member and callback carries a payload of
//! [`crate::state::payload_for`], which the workers check.
//!
//! Given a second queue (`--far-queue`), the groups span both: steps `b`
//! and `c` of every flow are made there ([`FAR_STEPS`]), and a batch's
//! odd members are added there (`Batch::on`), so their making and their
//! ends cross between the queues by the outboxes' messages.

use std::future::Future;
use std::time::{Duration, Instant};

use echomq::batch::{Batch, BatchOptions, Callback};
use echomq::flow::{FlowSpec, Step};
use echomq::{EnqueueOptions, EnqueueStatus, Error, Queue};

use crate::history::{Ev, History};
use crate::state::payload_for;

/// How long one call is retried before the producer gives up.
const GIVE_UP: Duration = Duration::from_secs(120);

/// The steps of every flow: (name, the steps it waits on).
pub const FLOW_STEPS: [(&str, &[&str]); 6] = [
    ("a", &[]),
    ("b", &[]),
    ("ab", &["a", "b"]),
    ("c", &[]),
    ("mid", &["ab", "c"]),
    ("top", &["mid", "c"]),
];

/// The steps of every flow put on the second queue, when there is one:
/// a leaf, and the leaf that two steps wait on.
pub const FAR_STEPS: [&str; 2] = ["b", "c"];

/// Payload numbers of flows and batches, apart from the plain jobs'.
const FLOW_N: u64 = 1 << 40;
const BATCH_N: u64 = 2 << 40;

/// Runs `call` until it answers, retrying a transient error until
/// [`GIVE_UP`]; `record` writes each failure (the error, whether it is
/// definite, the call's ms). Answers the last result.
async fn retrying<T, F, Fut>(mut call: F, mut record: impl FnMut(&Error, bool, u64)) -> (Result<T, Error>, u64)
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let give_up = Instant::now() + GIVE_UP;
    let mut retry = false;
    loop {
        let t0 = Instant::now();
        let res = call(retry).await;
        let ms = t0.elapsed().as_millis() as u64;
        match res {
            Err(e) if e.is_transient() && Instant::now() < give_up => {
                record(&e, false, ms);
                retry = true;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                record(&e, !e.is_transient(), ms);
                return (Err(e), ms);
            }
            Ok(v) => return (Ok(v), ms),
        }
    }
}

/// Adds flow `f{k}` (its [`FAR_STEPS`] on `far`, if given) and records
/// it: `FlowInvoke` before the first call, then `FlowOk` (a retry that
/// finds it answers "existing") or `FlowFail`.
pub async fn add_flow(q: &Queue, far: Option<&Queue>, h: &History, k: u64) {
    let flow = format!("f{k}");
    let job = |name: &str| format!("{flow}:{name}");
    let mut spec = FlowSpec::new().id(&flow);
    for (i, (name, after)) in FLOW_STEPS.iter().enumerate() {
        let mut step = Step::new(*name, &payload_for(FLOW_N + k * 8 + i as u64)).expect("a step");
        for a in after.iter() {
            step = step.after(*a);
        }
        if let Some(far) = far.filter(|_| FAR_STEPS.contains(name)) {
            step = step.on(far);
        }
        spec = spec.step(step);
    }
    h.write(Ev::FlowInvoke {
        flow: flow.clone(),
        steps: FLOW_STEPS
            .iter()
            .map(|(name, after)| (job(name), after.iter().map(|a| job(a)).collect()))
            .collect(),
    });
    let (res, ms) = retrying(
        |retry| {
            let (q, spec) = (q.clone(), spec.clone());
            async move {
                match q.add_flow(&spec).await {
                    Ok(_) => Ok("created"),
                    // ours, stored by a call whose answer was lost
                    Err(Error::FlowExists(_)) if retry => Ok("existing"),
                    Err(e) => Err(e),
                }
            }
        },
        |e, definite, ms| {
            h.write(Ev::FlowFail {
                flow: flow.clone(),
                error: e.to_string(),
                definite,
                ms,
            })
        },
    )
    .await;
    match res {
        Ok(status) => h.write(Ev::FlowOk {
            flow,
            status: status.into(),
            ms,
        }),
        Err(e) => eprintln!("flow {flow}: giving up: {e}"),
    }
}

/// Opens batch `b{k}` with a success and a complete callback, adds its
/// `members` in one call (given `far`, its even members in one call and
/// its odd ones on `far` in another), and closes it, each call retried as
/// [`add_flow`]'s; records `BatchInvoke`, each member's enqueue, and
/// `BatchClosed`.
pub async fn add_batch(q: &Queue, far: Option<&Queue>, h: &History, k: u64, members: u64) {
    let batch = format!("b{k}");
    let n = |j: u64| BATCH_N + k * (members + 2) + j;
    let opts = BatchOptions::new()
        .id(&batch)
        .on_success(Callback::new(&payload_for(n(members))).expect("a callback"))
        .on_complete(Callback::new(&payload_for(n(members + 1))).expect("a callback"));
    h.write(Ev::BatchInvoke {
        batch: batch.clone(),
        callbacks: vec![format!("{batch}:success"), format!("{batch}:complete")],
    });
    let fail = |what: &str, e: &Error, definite: bool, ms: u64| {
        h.write(Ev::EnqueueFail {
            id: format!("{batch} ({what})"),
            error: e.to_string(),
            definite,
            ms,
        })
    };
    let (opened, _) = retrying(
        |retry| {
            let (q, opts) = (q.clone(), opts.clone());
            async move {
                match q.open_batch(&opts).await {
                    Err(Error::BatchExists(id)) if retry => q.batch(&id),
                    r => r,
                }
            }
        },
        |e, d, ms| fail("open", e, d, ms),
    )
    .await;
    let Ok(b) = opened else {
        eprintln!("batch {batch}: could not open it");
        return;
    };
    let ids: Vec<String> = (0..members).map(|j| format!("{batch}m{j}")).collect();
    for id in &ids {
        h.write(Ev::EnqueueInvoke {
            id: id.clone(),
            dedup: None,
        });
    }
    // (the handle to add through, the member numbers it adds)
    let mut adds: Vec<(Batch, Vec<u64>)> = Vec::new();
    match far {
        None => adds.push((b.clone(), (0..members).collect())),
        Some(far) => {
            adds.push((b.clone(), (0..members).step_by(2).collect()));
            adds.push((
                b.on(far).expect("a queue of the same client"),
                (1..members).step_by(2).collect(),
            ));
        }
    }
    for (handle, js) in adds {
        let jobs: Vec<_> = js
            .iter()
            .map(|&j| (payload_for(n(j)), EnqueueOptions::new().id(&ids[j as usize])))
            .collect();
        let (added, ms) = retrying(
            |_| {
                let (handle, jobs) = (handle.clone(), jobs.clone());
                async move { handle.add_with(&jobs).await }
            },
            |e, d, ms| fail("add", e, d, ms),
        )
        .await;
        let Ok(added) = added else {
            eprintln!("batch {batch}: could not add its members");
            return;
        };
        for e in added {
            let status = match e.status {
                EnqueueStatus::Created => "created",
                EnqueueStatus::Existing => "existing",
                // made on its queue when the message the add left there is delivered
                EnqueueStatus::Sent => "sent",
                _ => "other",
            };
            h.write(Ev::EnqueueOk {
                id: e.id.clone(),
                status: status.into(),
                job: e.id,
                ms,
            });
        }
    }
    let (closed, ms) = retrying(
        |retry| {
            let b = b.clone();
            async move {
                match b.close().await {
                    Err(Error::BatchClosed(_)) if retry => Ok(()),
                    r => r,
                }
            }
        },
        |e, d, ms| fail("close", e, d, ms),
    )
    .await;
    match closed {
        Ok(()) => h.write(Ev::BatchClosed {
            batch,
            members: ids,
            ms,
        }),
        Err(e) => eprintln!("batch {batch}: could not close it: {e}"),
    }
}
