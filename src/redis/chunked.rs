//! Reading one entry in pieces, for an entry larger than the server lets one
//! reply to a client be (`client-output-buffer-limit normal`,
//! `maxmemory-clients`): a server that cannot send a reply drops the
//! connection, so a plain `XRANGE` or `XCLAIM` of such an entry can never
//! succeed. A script reads the entry on the server and answers a window of
//! [`CHUNK_BYTES`] of it at a time.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;

use crate::error::Error;

/// The most one piece carries: well under the limits managed services set
/// for a client's replies (1 MB hard, 512 KB soft on some).
pub(crate) const CHUNK_BYTES: usize = 128 * 1024;

/// The [`read_in_pieces`] script of a stream entry. KEYS: stream. ARGV:
/// entry id, byte offset, window size. The entry's field names and values,
/// laid end to end, are read from the offset for at most the window's
/// bytes. Answers `{lengths of every name and value, the window's bytes}`,
/// or false when the entry is gone (deleted, trimmed).
const CHUNK_LUA: &str = r#"
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then return false end
local start, window = tonumber(ARGV[2]), tonumber(ARGV[3])
local lens, out, pos, taken = {}, {}, 0, 0
for i, v in ipairs(e[1][2]) do
  local n = #v
  lens[i] = n
  if taken < window and pos + n > start then
    local from = math.max(start - pos, 0) + 1
    local to = math.min(n, from - 1 + window - taken)
    out[#out + 1] = string.sub(v, from, to)
    taken = taken + to - from + 1
  end
  pos = pos + n
end
return {lens, table.concat(out)}
"#;

static CHUNK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CHUNK_LUA));

/// Reads one value in windows of [`CHUNK_BYTES`] with `script`, which
/// takes `KEYS[1] = key`, `ARGV = {at, byte offset, window size}` and
/// answers `{lengths of the value's parts, the window's bytes}` (its parts
/// laid end to end), or false when the value is gone. Answers the lengths
/// and every byte, or `None` when it is gone. `what` names the value in
/// errors.
///
/// # Errors
/// What the server answered to a window (a dropped connection, `NOPERM`
/// for `EVALSHA` or for a command inside the script), or windows that do
/// not add up (the value changed while it was read).
pub(crate) async fn read_in_pieces(
    conn: &mut impl ConnectionLike,
    script: &redis::Script,
    key: &str,
    at: &str,
    what: &str,
) -> Result<Option<(Vec<usize>, Vec<u8>)>, Error> {
    let mut bytes: Vec<u8> = Vec::new();
    let mut lens: Option<Vec<usize>> = None;
    loop {
        let piece: Option<(Vec<usize>, Vec<u8>)> = script
            .key(key)
            .arg(at)
            .arg(bytes.len())
            .arg(CHUNK_BYTES)
            .invoke_async(conn)
            .await
            .map_err(Error::from_redis)?;
        let Some((l, window)) = piece else {
            return Ok(None);
        };
        if lens.as_ref().is_some_and(|known| *known != l) {
            return Err(Error::unparsable(
                "a piece",
                format!("{what} changed while it was read in pieces"),
            ));
        }
        let total: usize = l.iter().sum();
        lens = Some(l);
        if window.is_empty() && bytes.len() < total {
            return Err(Error::unparsable(
                "a piece",
                format!("an empty piece of {what} at byte {}", bytes.len()),
            ));
        }
        bytes.extend_from_slice(&window);
        if bytes.len() >= total {
            if bytes.len() > total {
                return Err(Error::unparsable(
                    "pieces",
                    format!("{what}: {} bytes for {total}", bytes.len()),
                ));
            }
            return Ok(Some((lens.unwrap_or_default(), bytes)));
        }
    }
}

/// An entry's field/value pairs, read [`CHUNK_BYTES`] at a time
/// ([`read_in_pieces`]), or `None` when the entry is gone.
///
/// # Errors
/// As [`read_in_pieces`], and an odd number of parts.
pub(crate) async fn fetch_entry(
    conn: &mut impl ConnectionLike,
    stream: &str,
    id: &str,
) -> Result<Option<Vec<(Vec<u8>, Vec<u8>)>>, Error> {
    let what = format!("entry {id}");
    let Some((lens, bytes)) = read_in_pieces(conn, &CHUNK, stream, id, &what).await? else {
        return Ok(None);
    };
    if lens.len() % 2 != 0 {
        return Err(Error::unparsable(
            "entry pieces",
            format!("{what}: an odd number of parts {lens:?}"),
        ));
    }
    let mut fields = Vec::with_capacity(lens.len() / 2);
    let mut rest = bytes.as_slice();
    for pair in lens.chunks(2) {
        let (name, r) = rest.split_at(pair[0]);
        let (value, r) = r.split_at(pair[1]);
        fields.push((name.to_vec(), value.to_vec()));
        rest = r;
    }
    Ok(Some(fields))
}
