//! Flows and batches on a cluster: each keeps to its queue's slot, so a
//! flow on every master runs as on one server, its parents enqueued by
//! the scripts that end their children on that master.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::batch::{BatchOptions, Callback};
use echomq::flow::{ChildOutcome, FlowSpec, Step, StepState};
use echomq::server::LocalCluster;
use echomq::{Client, Job, Worker};
use serde_json::{Value, json};

use super::common;
use super::{name_on, opts};

// A flow (charge and reserve, then email) and a batch on a queue of each
// master, one worker for all: every email reads both its children's
// results, every batch's callback runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_and_batches_run_on_every_master() {
    let cluster = LocalCluster::builder().replicas_per_master(0).start().unwrap();
    let client = Client::connect_with(&cluster.url(), opts()).await.unwrap();
    let mut queues = Vec::new();
    for (i, port) in cluster.master_ports().unwrap().iter().enumerate() {
        queues.push(
            client
                .queue(&name_on(&cluster, *port, &format!("flow{i}-")))
                .await
                .unwrap(),
        );
    }
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut worker = Worker::new();
    for q in &queues {
        let seen = seen.clone();
        worker = worker.queue(q.clone(), move |job: Job<Value>| {
            let seen = seen.clone();
            async move {
                let kids = job.child_results::<String>().await?;
                let got: Vec<String> = kids
                    .into_iter()
                    .map(|c| match c.outcome {
                        ChildOutcome::Completed(r) => r,
                        other => format!("{other:?}"),
                    })
                    .collect();
                seen.lock().unwrap().push(format!("{}{got:?}", job.id()));
                Ok::<_, echomq::HandlerError>(format!("{}-done", job.id()))
            }
        });
    }
    let handle = worker.spawn().unwrap();
    let mut flows = Vec::new();
    for q in &queues {
        let spec = FlowSpec::new()
            .id("o")
            .step(Step::new("charge", &1).unwrap())
            .step(Step::new("reserve", &2).unwrap())
            .step(Step::new("email", &3).unwrap().after("charge").after("reserve"));
        flows.push(q.add_flow(&spec).await.unwrap());
        let batch = q
            .open_batch(
                &BatchOptions::new()
                    .id("b")
                    .on_success(Callback::new(&json!("cb")).unwrap()),
            )
            .await
            .unwrap();
        batch.add(&[1, 2]).await.unwrap();
        batch.close().await.unwrap();
    }
    let all_ended = || async {
        for f in &flows {
            if !f.status().await.unwrap().is_ended() {
                return false;
            }
        }
        seen.lock()
            .unwrap()
            .iter()
            .filter(|s| s.starts_with("b:success"))
            .count()
            == 3
    };
    assert!(
        common::eventually(Duration::from_secs(20), all_ended).await,
        "{:?}",
        seen.lock().unwrap()
    );
    handle.shutdown().await.unwrap();
    for f in &flows {
        assert_eq!(f.status().await.unwrap().count(StepState::Completed), 3);
    }
    let seen = seen.lock().unwrap();
    let emails: Vec<&String> = seen.iter().filter(|s| s.starts_with("o:email")).collect();
    assert_eq!(emails.len(), 3, "{seen:?}");
    for e in emails {
        assert_eq!(e, r#"o:email["o:charge-done", "o:reserve-done"]"#);
    }
}
