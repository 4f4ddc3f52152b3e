//! Job kinds: one queue carries several kinds of job, each with its own
//! payload type. A [`JobKind`] names its kind; enqueue records it on the
//! job (field `kd`), a claim hands it back, and a router
//! ([`Kinds`](crate::kinds::Kinds)) runs the kind's handler.

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::validate::MAX_KIND_BYTES;

/// A typed job: a payload type that names its kind, as River's `Kind()` or
/// Sidekiq's worker class. [`Queue::enqueue_job`](crate::Queue::enqueue_job)
/// records [`KIND`](Self::KIND) on the job, and
/// [`Kinds`](crate::kinds::Kinds) routes each job to its kind's handler.
///
/// The kind is a stable name, not the Rust type's: rename the type freely,
/// but keep `KIND` while jobs of the old name may still wait in a queue.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
///
/// impl echomq::JobKind for SendEmail {
///     const KIND: &'static str = "send_email";
/// }
/// ```
pub trait JobKind: Serialize + DeserializeOwned {
    /// The kind's name: 1 to [`MAX_KIND_BYTES`] bytes, no control
    /// characters (checked at enqueue and when a router is built).
    const KIND: &'static str;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    // Kinds are checked like ids: not empty, at most MAX_KIND_BYTES, no control characters.
    #[test]
    fn kinds_are_validated() {
        assert!(crate::validate::kind("send_email").is_ok());
        assert!(crate::validate::kind("émail.v2/Ünïcode").is_ok());
        assert!(crate::validate::kind(&"k".repeat(MAX_KIND_BYTES)).is_ok());
        for bad in [
            String::new(),
            "k".repeat(MAX_KIND_BYTES + 1),
            "a\nb".into(),
            "\u{7f}".into(),
        ] {
            match crate::validate::kind(&bad) {
                Err(Error::InvalidId { what: "job kind", .. }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    // Enqueue options and schedules check their kind when they are used.
    #[test]
    fn options_check_their_kind() {
        use crate::EnqueueOptions;
        assert!(EnqueueOptions::new().kind("email").validate().is_ok());
        let bad = EnqueueOptions::new().kind("").validate();
        assert!(matches!(bad, Err(Error::InvalidId { what: "job kind", .. })), "{bad:?}");
        #[cfg(feature = "cron")]
        {
            use crate::schedule::Schedule;
            assert!(Schedule::new("s", "* * * * *").kind("report").check().is_ok());
            let bad = Schedule::new("s", "* * * * *").kind("a\tb").check();
            assert!(matches!(bad, Err(Error::InvalidId { what: "job kind", .. })));
        }
    }
}
