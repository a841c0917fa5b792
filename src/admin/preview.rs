//! Entries cut to size on the server, for pages that show them (feature
//! `dashboard`): a page sends only what it shows, however large the
//! entries are.

use std::sync::LazyLock;

use redis::Value;

use super::{Admin, DeadLetter, StreamEntry};
use crate::error::Error;

/// KEYS: stream. ARGV: `XRANGE` or `XREVRANGE`, its two bounds, count, the
/// most bytes of a value to send. The entries, each field value longer than
/// that cut to it server-side, followed by ` … (<n> bytes in all)`: a page
/// that shows entries sends only what it shows, however large they are.
const PREVIEW_LUA: &str = r#"
local rows = redis.call(ARGV[1], KEYS[1], ARGV[2], ARGV[3], 'COUNT', ARGV[4])
local max = tonumber(ARGV[5])
for _, row in ipairs(rows) do
  local f = row[2]
  for i = 2, #f, 2 do
    local v = f[i]
    if #v > max then
      f[i] = string.sub(v, 1, max) .. ' … (' .. #v .. ' bytes in all)'
    end
  end
end
return rows
"#;

static PREVIEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PREVIEW_LUA));

impl Admin {
    /// For pages that show entries: `count` entries of `stream` from
    /// `start` to `end` (`XRANGE`, or `XREVRANGE` with `newest_first`: then
    /// `start` is the upper bound), every field value longer than
    /// `max_bytes` cut on the server to that many bytes plus ` … (<n> bytes
    /// in all)`. A missing key has none.
    pub(crate) async fn preview(
        &self,
        stream: &str,
        (start, end): (&str, &str),
        count: usize,
        newest_first: bool,
        max_bytes: usize,
    ) -> Result<Vec<StreamEntry>, Error> {
        let mut call = PREVIEW.key(stream);
        call.arg(if newest_first { "XREVRANGE" } else { "XRANGE" })
            .arg(start)
            .arg(end)
            .arg(count)
            .arg(max_bytes);
        let mut conn = self.conn.clone();
        let v: Value = call
            .invoke_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        super::stream_entries(v, "preview script reply")
    }

    /// [`preview`](Self::preview) of dead letters, oldest first from
    /// `start`, read apart as [`dead_letters`](Self::dead_letters) does.
    pub(crate) async fn dead_letters_preview(
        &self,
        dlq: &str,
        start: &str,
        count: usize,
        max_bytes: usize,
    ) -> Result<Vec<DeadLetter>, Error> {
        Ok(self
            .preview(dlq, (start, "+"), count, false, max_bytes)
            .await?
            .into_iter()
            .map(|e| super::dead_letters::split(e.id, e.fields))
            .collect())
    }
}
