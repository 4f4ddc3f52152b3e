//! `lua/lane_config.lua`: sets a lane's cap or weight (or the default of
//! lanes) and settles the lanes it changes.

use super::Spec;
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::Keys;

pub(super) static SPEC: Spec = Spec::new(
    "lane_config",
    include_str!("../../lua/lane_config.lua"),
    &["ring", "setting"],
    false,
    &["prefix", "lane", "value", "cursor", "count"],
);

/// Which setting of lanes.
#[derive(Clone, Copy)]
pub(crate) enum Setting {
    Cap,
    Weight,
}

/// A cap or weight as the script takes it: "" removes it.
fn value_arg(value: Option<u32>) -> String {
    value.map_or_else(String::new, |v| v.to_string())
}

/// One step of setting `setting` of `lane` (`None`: the default of lanes)
/// to `value` (`None` removes it; at least 1: the caller checked): the
/// first step (`cursor` `None`) writes it, each settles a batch of about
/// `count` lanes. Answers where the next step goes on from, `None` once
/// every lane is settled.
pub(crate) async fn run(
    conn: &mut Conn,
    k: &Keys,
    setting: Setting,
    lane: Option<&str>,
    value: Option<u32>,
    cursor: Option<&str>,
    count: usize,
) -> Result<Option<String>> {
    let key = match setting {
        Setting::Cap => &k.lane_caps,
        Setting::Weight => &k.lane_weights,
    };
    let mut call = SPEC.call();
    call.key(&k.lane_ring).key(key);
    call.arg(&k.base)
        .arg(lane.unwrap_or_default())
        .arg(value_arg(value))
        .arg(cursor.unwrap_or_default())
        .arg(count);
    let mut r = call.run(conn).await?;
    let (_now, next) = (r.uint()?, r.string()?);
    Ok((next != "0").then_some(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    // A setting is sent as its number; None as "", which removes it.
    #[test]
    fn values_as_the_script_takes_them() {
        assert_eq!(value_arg(None), "");
        assert_eq!(value_arg(Some(7)), "7");
    }
}
