//! Passwords in the helper's hands: redacted wherever `Debug` output would
//! show them, percent-encoded where a URL carries them.

/// What `Debug` output shows instead of a secret.
pub(super) const REDACTED: &str = "<redacted>";

/// `value` of server argument `--name` as `Debug` output shows it: the
/// passwords of `requirepass`, `masterauth` and `sentinel auth-pass`, and
/// the `>password`/`#hash` rules of a `user` line, are redacted.
pub fn redact_arg(name: &str, value: &str) -> String {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    match name.as_str() {
        "requirepass" | "masterauth" | "tls-key-file-pass" | "tls-client-key-file-pass" => REDACTED.to_owned(),
        "user" | "sentinel" => value
            .split(' ')
            .enumerate()
            .map(|(i, word)| {
                let secret = word.starts_with('>') || word.starts_with('#');
                // `sentinel auth-pass NAME PASSWORD`: the fourth word.
                let auth_pass = name == "sentinel" && i == 2 && value.starts_with("auth-pass ");
                if secret || auth_pass { REDACTED } else { word }
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => value.to_owned(),
    }
}

/// A server's argument list (`--name`, `value`, ...) with its secrets redacted.
pub(super) fn redact_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut name: Option<&str> = None;
    for arg in args {
        match name.take() {
            Some(n) => out.push(redact_arg(n, arg)),
            None => {
                if arg.starts_with("--") {
                    name = Some(arg);
                }
                out.push(arg.clone());
            }
        }
    }
    out
}

/// `text` with the characters a URL's userinfo cannot hold percent-encoded.
pub(super) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Passwords in server arguments never reach Debug output; other values do.
    #[test]
    fn secrets_in_arguments_are_redacted() {
        assert_eq!(redact_arg("requirepass", "pw1"), REDACTED);
        assert_eq!(redact_arg("--masterauth", "pw2"), REDACTED);
        assert_eq!(
            redact_arg("user", "ops on >pw3 #0a1b ~* +@all"),
            "ops on <redacted> <redacted> ~* +@all"
        );
        assert_eq!(
            redact_arg("sentinel", "auth-pass mymaster pw4"),
            "auth-pass mymaster <redacted>"
        );
        assert_eq!(
            redact_arg("sentinel", "monitor m 127.0.0.1 6379 2"),
            "monitor m 127.0.0.1 6379 2"
        );
        assert_eq!(redact_arg("maxmemory", "100mb"), "100mb");
        let args: Vec<String> = ["--requirepass", "pw5", "--port", "1"].map(String::from).to_vec();
        assert_eq!(redact_args(&args), ["--requirepass", REDACTED, "--port", "1"]);
        assert_eq!(percent_encode("a:b@c d"), "a%3Ab%40c%20d");
    }
}
