//! Building pages: escaping user data, links relative to the mount point,
//! times, and the page frame.

use std::fmt::Write as _;

/// Escapes text for HTML element content and quoted attribute values.
/// Job ids, payloads, errors and queue names are user data: every one of
/// them goes through here (or [`segment`]) on its way into a page.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes one URL path segment or query value: everything but the
/// unreserved characters, so a `/`, `?`, `#` or `..` in a job id stays
/// inside its segment. The result needs no further HTML escaping.
pub(crate) fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            // `.` too: a segment of ".." would climb out of the path.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The dashboard's own first path segments: a queue page at `/{queue}`
/// must not be taken for them.
const RESERVED: [&str; 3] = ["events", "assets", "queues"];

/// A queue's path segment, relative to the dashboard's root (its pages
/// live at `/{queue}`): the name as a [`segment`], with the first
/// character percent-encoded when the name is one of the dashboard's own
/// segments (`events`, `assets`, `queues`), so that its pages still route
/// to the queue (routes match the path as sent; the queue's name is read
/// decoded).
pub(crate) fn queue_path(name: &str) -> String {
    let s = segment(name);
    match name.as_bytes().first() {
        Some(b) if RESERVED.contains(&name) => format!("%{b:02X}{}", &s[1..]),
        _ => s,
    }
}

/// Where the dashboard's root is, seen from the page at dashboard path
/// `rel` (the path the nested router sees; `original` is the full request
/// path), as relative URLs, so pages never name the mount point.
pub(crate) struct Base {
    /// The prefix that leads to the dashboard's paths (`queues/...`,
    /// `assets/...`, `events`): `./`, `../`, ...
    pub(crate) up: String,
    /// The root page itself. Mounted with `Router::nest("/admin/queues")`
    /// the root is `/admin/queues` (axum does not route the form with a
    /// trailing slash), so links to it name its last segment.
    pub(crate) root: String,
}

pub(crate) fn base(rel: &str, original: &str) -> Base {
    let at_root = rel.is_empty() || rel == "/";
    // The mount point: the original path less the dashboard's own part.
    let mount = if at_root {
        original.strip_suffix('/').unwrap_or(original)
    } else {
        original.strip_suffix(rel).unwrap_or("")
    };
    let last = mount.rsplit('/').next().unwrap_or("");
    if at_root {
        if original.ends_with('/') || last.is_empty() {
            return Base {
                up: "./".into(),
                root: "./".into(),
            };
        }
        // At `/admin/queues` the browser resolves against `/admin/`.
        return Base {
            up: format!("./{last}/"),
            root: format!("./{last}"),
        };
    }
    let depth = rel.matches('/').count().saturating_sub(1);
    let up = if depth == 0 {
        "./".to_owned()
    } else {
        "../".repeat(depth)
    };
    let root = if last.is_empty() {
        up.clone()
    } else {
        format!("{up}../{last}")
    };
    Base { up, root }
}

/// A server time (ms since the Unix epoch) as UTC, to the millisecond.
pub(crate) fn time(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// A JSON document pretty-printed (or bytes that are not JSON as lossy
/// text), escaped for a `<pre>`.
pub(crate) fn pretty(bytes: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) => escape(&serde_json::to_string_pretty(&v).unwrap_or_default()),
        Err(_) => escape(&String::from_utf8_lossy(bytes)),
    }
}

/// The frame of every page. `title` and `crumbs` are HTML already built
/// from escaped parts; `live` is the (relative) URL of the page's event
/// stream.
pub(crate) fn page(app: &str, base: &Base, crumbs: &str, live: &str, body: &str) -> String {
    let (up, root) = (&base.up, &base.root);
    let app = escape(app);
    // a page without a live stream has no live badge to say "offline"
    let badge = if live.is_empty() {
        ""
    } else {
        "<span id=\"live\" class=\"live\" title=\"live updates\">offline</span>"
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{app}</title>\
         <link rel=\"stylesheet\" href=\"{up}assets/dashboard.css\">\
         <script src=\"{up}assets/dashboard.js\" defer></script></head>\
         <body data-live=\"{live}\"><header><a class=\"brand\" href=\"{root}\">{app}</a>{crumbs}\
         {badge}</header>\
         <main>{body}</main></body></html>\n"
    )
}

/// An event's name in plain words, as the pages show it (dashboard.js has
/// the same words): "promoted" is internal jargon for a delayed job that
/// became due.
pub(crate) fn event_words(kind: &str) -> &str {
    match kind {
        "promoted" => "due",
        "rate_limited" => "rate limited",
        "cancel_requested" => "cancel requested",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Markup in user data comes out as text, quotes included.
    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        assert_eq!(escape("plain-id_7"), "plain-id_7");
        assert_eq!(escape("é✓"), "é✓");
    }

    // A path segment cannot break out of its place in a URL or an attribute.
    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(segment("order-7_x~"), "order-7_x~");
        assert_eq!(segment("../a/b?c#d"), "%2E%2E%2Fa%2Fb%3Fc%23d");
        assert_eq!(segment("\"><x>"), "%22%3E%3Cx%3E");
        assert_eq!(segment("é"), "%C3%A9");
    }

    // Links climb back to the mount point from every page, mounted or not.
    #[test]
    fn relative_links_to_the_root() {
        let b = |rel, orig| {
            let b = base(rel, orig);
            (b.up, b.root)
        };
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(b("/", "/admin/queues"), s("./queues/", "./queues"));
        assert_eq!(b("/", "/"), s("./", "./"));
        assert_eq!(b("/", "/admin/queues/"), s("./", "./"));
        assert_eq!(b("/events", "/admin/queues/events"), s("./", "./../queues"));
        assert_eq!(b("/queues/q", "/admin/queues/queues/q"), s("../", "../../queues"));
        assert_eq!(
            b("/queues/q/jobs/7", "/x/queues/q/jobs/7"),
            s("../../../", "../../../../x")
        );
        assert_eq!(b("/queues/q", "/queues/q"), s("../", "../"));
        assert_eq!(
            b("/queues/q/jobs/7/retry", "/x/queues/q/jobs/7/retry"),
            s("../../../../", "../../../../../x")
        );
    }

    // A queue named like one of the dashboard's own segments gets an
    // encoded first character; others their plain segment.
    #[test]
    fn queue_paths_avoid_the_fixed_routes() {
        assert_eq!(queue_path("emails"), "emails");
        assert_eq!(queue_path("events"), "%65vents");
        assert_eq!(queue_path("queues"), "%71ueues");
        assert_eq!(queue_path("a/b"), "a%2Fb");
        assert_eq!(queue_path(".."), "%2E%2E");
    }

    // Server times read as UTC dates.
    #[test]
    fn times_are_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(time(951_782_400_123), "2000-02-29 00:00:00.123 UTC");
        assert_eq!(time(1_796_147_192_005), "2026-12-01 17:46:32.005 UTC");
    }

    // Payloads are pretty-printed and escaped; non-JSON shows as text.
    #[test]
    fn payloads_are_pretty_and_escaped() {
        assert_eq!(
            pretty(br#"{"a":"<b>"}"#),
            "{\n  &quot;a&quot;: &quot;&lt;b&gt;&quot;\n}"
        );
        assert_eq!(pretty(b"<not json>"), "&lt;not json&gt;");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
    }
}
