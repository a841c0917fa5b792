//! Reading one entry in pieces, for an entry larger than the server lets one
//! reply to a client be (`client-output-buffer-limit normal`,
//! `maxmemory-clients`): a server that cannot send a reply drops the
//! connection, so a plain `XRANGE` or `XCLAIM` of such an entry can never
//! succeed. A script reads the entry on the server and answers a window of
//! [`CHUNK_BYTES`] of it at a time.

use std::sync::LazyLock;

use redis::aio::MultiplexedConnection;

use crate::error::Error;

/// The most one piece carries: well under the limits managed services set
/// for a client's replies (1 MB hard, 512 KB soft on some).
pub(crate) const CHUNK_BYTES: usize = 128 * 1024;

/// KEYS: stream. ARGV: entry id, byte offset, window size. The entry's
/// field names and values, laid end to end, are read from the offset for at
/// most the window's bytes. Answers `{lengths of every name and value, the
/// window's bytes}`, or false when the entry is gone (deleted, trimmed).
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

/// An entry's field/value pairs, read [`CHUNK_BYTES`] at a time with a
/// script (`EVALSHA`), or `None` when the entry is gone.
///
/// # Errors
/// What the server answered to a piece (a dropped connection, `NOPERM` for
/// `EVALSHA` or for the `XRANGE` inside it), or an unparsable piece.
pub(crate) async fn fetch_entry(
    conn: &mut MultiplexedConnection,
    stream: &str,
    id: &str,
) -> Result<Option<Vec<(Vec<u8>, Vec<u8>)>>, Error> {
    let mut bytes: Vec<u8> = Vec::new();
    let mut lens: Vec<usize> = Vec::new();
    loop {
        let piece: Option<(Vec<usize>, Vec<u8>)> = CHUNK
            .key(stream)
            .arg(id)
            .arg(bytes.len())
            .arg(CHUNK_BYTES)
            .invoke_async(conn)
            .await
            .map_err(Error::from_redis)?;
        let Some((l, chunk)) = piece else {
            return Ok(None);
        };
        if !lens.is_empty() && l != lens {
            // Entries never change; a different layout is a different entry
            // under the same id (the stream was deleted and written again).
            return Err(Error::unparsable(
                "entry piece",
                format!("entry {id} changed while it was read in pieces"),
            ));
        }
        lens = l;
        let total: usize = lens.iter().sum();
        if chunk.is_empty() && bytes.len() < total {
            return Err(Error::unparsable(
                "entry piece",
                format!("an empty piece of entry {id} at byte {}", bytes.len()),
            ));
        }
        bytes.extend_from_slice(&chunk);
        if bytes.len() >= total {
            break;
        }
    }
    if lens.len() % 2 != 0 || bytes.len() != lens.iter().sum::<usize>() {
        return Err(Error::unparsable(
            "entry pieces",
            format!("entry {id}: {} bytes for lengths {lens:?}", bytes.len()),
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
