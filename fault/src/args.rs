//! `--name=value` arguments of the fault binaries (no dependency needed).

use std::collections::HashMap;
use std::str::FromStr;

/// Parsed arguments.
#[derive(Debug, Clone, Default)]
pub struct Args {
    map: HashMap<String, String>,
}

impl Args {
    /// Parses `std::env::args()`; `--flag` alone means `--flag=true`.
    pub fn from_env() -> Args {
        Self::parse(std::env::args().skip(1))
    }

    /// Parses an argument list.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Args {
        let mut map = HashMap::new();
        for a in args {
            let Some(a) = a.strip_prefix("--") else {
                panic!("unexpected argument {a:?} (use --name=value)");
            };
            match a.split_once('=') {
                Some((k, v)) => map.insert(k.to_owned(), v.to_owned()),
                None => map.insert(a.to_owned(), "true".to_owned()),
            };
        }
        Args { map }
    }

    /// A required argument.
    pub fn req(&self, name: &str) -> String {
        self.map
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("missing --{name}=..."))
    }

    /// An optional argument.
    pub fn opt(&self, name: &str) -> Option<String> {
        self.map.get(name).cloned()
    }

    /// A parsed argument with a default.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> T {
        match self.map.get(name) {
            Some(v) => v.parse().unwrap_or_else(|_| panic!("bad value for --{name}: {v:?}")),
            None => default,
        }
    }
}

impl Args {
    /// The queue options every fault process uses: keep every record (the
    /// checker reads them) and `--response-timeout-ms` (default 1,000) for
    /// both timeouts.
    pub fn queue_options(&self) -> echomq::QueueOptions {
        let timeout = self.response_timeout();
        echomq::QueueOptions::new()
            .keep_completed(echomq::Retention::All)
            .keep_failed(echomq::Retention::All)
            .response_timeout(timeout)
            .connection_timeout(timeout)
    }

    /// `--response-timeout-ms` (default 1,000).
    pub fn response_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.get("response-timeout-ms", 1000u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values, flags and defaults parse as the binaries expect.
    #[test]
    fn parses_values_flags_and_defaults() {
        let a = Args::parse(["--lease-ms=700", "--guarded", "--src=w1"].map(String::from));
        assert_eq!(a.get("lease-ms", 0u64), 700);
        assert!(a.get("guarded", false));
        assert_eq!(a.req("src"), "w1");
        assert_eq!(a.get("concurrency", 4usize), 4);
        assert_eq!(a.opt("nope"), None);
    }
}
