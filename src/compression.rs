//! Payload compression (feature `compression`): a queue given
//! [`QueueOptions::compress_above`](crate::QueueOptions::compress_above)
//! stores a JSON payload longer than that as an LZ4 block behind a marker,
//! and every reader (a claim, [`Queue::job`](crate::Queue::job), a listing)
//! gives back the JSON. The marker starts with a NUL byte, which no JSON
//! text starts with, so stored payloads of either form read alike and a
//! queue may switch at any time; a process built without the feature reads
//! plain payloads only, and a compressed one fails to decode with an error
//! that says so (build every process of a queue that compresses with the
//! feature).
//!
//! The stored form: `MAGIC`, the JSON's length (4 bytes, little-endian),
//! then the LZ4 block. A length over
//! [`MAX_PAYLOAD_LIMIT`](crate::validate::MAX_PAYLOAD_LIMIT) is refused before
//! anything is allocated (a decompression bomb), as is a block that does
//! not decompress to exactly that length.

/// What a compressed payload starts with.
pub(crate) const MAGIC: &[u8] = b"\0emqz1";

/// Whether `stored` is in the compressed form (or failed to decompress:
/// readers replace a payload they could decompress).
pub(crate) fn is_compressed(stored: &[u8]) -> bool {
    stored.starts_with(MAGIC)
}

/// `json` as a queue that compresses above `above` bytes stores it: the
/// compressed form when it is longer than that and compression makes it
/// smaller, else as it is.
#[cfg(feature = "compression")]
pub(crate) fn compress(json: Vec<u8>, above: Option<usize>) -> Vec<u8> {
    match above {
        Some(n) if json.len() > n => {
            let Ok(len) = u32::try_from(json.len()) else {
                return json;
            };
            let block = lz4_flex::block::compress(&json);
            if MAGIC.len() + 4 + block.len() >= json.len() {
                return json;
            }
            let mut out = Vec::with_capacity(MAGIC.len() + 4 + block.len());
            out.extend_from_slice(MAGIC);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&block);
            out
        }
        _ => json,
    }
}

/// The JSON of a stored payload: decompressed when it is in the
/// compressed form, else as it is; `Err` says why a compressed one could
/// not be read (it is then left as stored, and decoding it fails).
pub(crate) fn decompress(stored: Vec<u8>) -> Result<Vec<u8>, (Vec<u8>, String)> {
    if !is_compressed(&stored) {
        return Ok(stored);
    }
    inflate(&stored).map_err(|why| (stored, why))
}

#[cfg(feature = "compression")]
fn inflate(stored: &[u8]) -> Result<Vec<u8>, String> {
    let rest = &stored[MAGIC.len()..];
    let (len, block) = rest.split_at_checked(4).ok_or("a compressed payload cut short")?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| "a compressed payload cut short")?) as usize;
    if len > crate::validate::MAX_PAYLOAD_LIMIT {
        return Err(format!(
            "a compressed payload says it holds {len} bytes, more than the {} a payload may",
            crate::validate::MAX_PAYLOAD_LIMIT
        ));
    }
    let out = lz4_flex::block::decompress(block, len).map_err(|e| format!("a corrupt compressed payload: {e}"))?;
    if out.len() != len {
        return Err(format!("a corrupt compressed payload: {} bytes, not {len}", out.len()));
    }
    Ok(out)
}

#[cfg(not(feature = "compression"))]
fn inflate(_stored: &[u8]) -> Result<Vec<u8>, String> {
    Err("a compressed payload: build echomq with the `compression` feature to read it".into())
}

/// A stored payload as readers give it out: the JSON, or (logged) as
/// stored when it could not be decompressed.
pub(crate) fn readable(stored: Vec<u8>, id: &str) -> Vec<u8> {
    match decompress(stored) {
        Ok(json) => json,
        Err((stored, why)) => {
            tracing::warn!(job_id = %id, %why, "a job's payload could not be decompressed");
            stored
        }
    }
}

/// The decode error of a payload left in the compressed form (`readable`
/// could not decompress it).
pub(crate) fn undecodable(stored: &[u8]) -> serde_json::Error {
    let why = match decompress(stored.to_vec()) {
        Err((_, why)) => why,
        Ok(_) => "a compressed payload".to_owned(),
    };
    <serde_json::Error as serde::de::Error>::custom(why)
}

#[cfg(all(test, feature = "compression"))]
mod tests {
    use super::*;

    // Round trip above the threshold, left alone below it or when it does
    // not shrink; a bomb, a cut block and garbage are refused.
    #[test]
    fn payloads_round_trip_and_bad_ones_are_refused() {
        let json = serde_json::to_vec(&serde_json::json!({"rows": vec!["same text"; 500]})).unwrap();
        let stored = compress(json.clone(), Some(100));
        assert!(is_compressed(&stored) && stored.len() < json.len() / 5);
        assert_eq!(decompress(stored.clone()).unwrap(), json);
        assert_eq!(compress(json.clone(), Some(json.len())), json);
        assert_eq!(compress(json.clone(), None), json);
        let random: Vec<u8> = (0..200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(compress(random.clone(), Some(10)), random);

        let mut bomb = MAGIC.to_vec();
        bomb.extend_from_slice(&u32::MAX.to_le_bytes());
        bomb.extend_from_slice(&stored[MAGIC.len() + 4..]);
        assert!(decompress(bomb).unwrap_err().1.contains("more than"));
        let cut = stored[..MAGIC.len() + 2].to_vec();
        assert!(decompress(cut).is_err());
        let mut lying = stored.clone();
        let n = lying.len();
        lying[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&(json.len() as u32 + 1).to_le_bytes());
        assert!(decompress(lying).is_err());
        let mut garbage = stored;
        garbage.truncate(n - 3);
        assert!(decompress(garbage).is_err());
        assert!(serde_json::from_slice::<serde_json::Value>(MAGIC).is_err());
    }
}
