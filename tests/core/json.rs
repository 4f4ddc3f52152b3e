//! The JSON shape of the job types (`Serialize`), as the guide's "In a web
//! application" and `JobInfo`'s docs give it, read from a real job.

use std::time::Duration;

use echomq::{Counts, EnqueueOptions, EnqueueStatus, Enqueued, JobState};
use serde_json::json;

use super::common;

#[tokio::test]
async fn a_job_serializes_to_the_documented_shape() {
    let (_s, q) = common::setup("json").await;
    let opts = EnqueueOptions::new().kind("email").lane("tenant-1").max_attempts(2);
    let added = q.enqueue_with(&json!({"to": "ada@example.com"}), &opts).await.unwrap();
    let v = serde_json::to_value(&added).unwrap();
    assert_eq!(v, json!({"id": added.id, "status": "created"}));
    let back: Enqueued = serde_json::from_value(v).unwrap();
    assert_eq!(back, added);

    let lease = q.claim(1, Duration::from_secs(30)).await.unwrap().remove(0);
    q.retry(&lease, Some(Duration::ZERO), "smtp timeout").await.unwrap();
    let info = q.job(&added.id).await.unwrap();
    let v = serde_json::to_value(&info).unwrap();
    assert_eq!(v["id"], json!(added.id));
    assert_eq!(v["state"], json!("pending"));
    assert_eq!(v["attempts"], json!(1));
    assert_eq!(v["failures"], json!(1));
    assert_eq!(v["payload"], json!({"to": "ada@example.com"}));
    assert_eq!(v["last_error"], json!("smtp timeout"));
    assert_eq!(v["errors"][0]["message"], json!("smtp timeout"));
    assert!(v["errors"][0]["at_ms"].as_u64().unwrap() >= info.created_ms);
    assert_eq!(v["limits"]["max_attempts"], json!(2));
    assert!(v["limits"]["backoff"]["kind"].is_string());
    assert_eq!(v["limits"]["timeout_ms"], json!(null));
    assert_eq!(v["kind"], json!("email"));
    assert_eq!(v["lane"], json!("tenant-1"));
    assert_eq!(v["finished_ms"], json!(null));
    assert!(v["created_ms"].as_u64().unwrap() > 0);
    let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "attempts",
            "cancel_requested_ms",
            "checkpoint",
            "created_ms",
            "deadline_ms",
            "errors",
            "expires_at_ms",
            "failures",
            "finished_ms",
            "first_started_ms",
            "holder",
            "id",
            "kind",
            "lane",
            "last_error",
            "limits",
            "payload",
            "progress",
            "result",
            "stalls",
            "state",
            "token"
        ]
    );

    let state: JobState = serde_json::from_value(json!("cancelled")).unwrap();
    assert_eq!(state, JobState::Cancelled);
    assert_eq!(
        serde_json::to_value(EnqueueStatus::Deduplicated).unwrap(),
        json!("deduplicated")
    );
    let counts = q.counts().await.unwrap();
    let cv = serde_json::to_value(counts).unwrap();
    assert_eq!(cv["pending"], json!(1));
    assert_eq!(cv["paused"], json!(false));
    assert_eq!(serde_json::from_value::<Counts>(cv).unwrap(), counts);
}
