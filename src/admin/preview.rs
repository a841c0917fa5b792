//! Entries cut to size on the server, for pages that show them (the
//! dashboard's): a page sends only what it shows, however large the entries
//! are; dead letters filtered and counted by error in a script; deletes and
//! capped appends.

use std::sync::LazyLock;

use redis::Value;

use super::{Admin, DeadLetter, StreamEntry};
use crate::error::Error;
use crate::stream::EntryId;

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

/// KEYS: dead-letter stream. ARGV: `XRANGE` or `XREVRANGE`, its two bounds,
/// how many matches to send (0: count them only), the most bytes of a value
/// to send, the text the error must contain (`''`: any dead letter), the
/// most entries to look at in this call. Answers `{matches, how many
/// matched, the last id looked at, 1 when the range is exhausted}`: the
/// caller goes on from `(<last id>` until it has enough or the range is
/// exhausted, so one call never scans more than that many entries. A dead
/// letter matches the text as `DeadLetterFilter::with_error_contains` does:
/// its appended `error` (of the seven appended pairs, read from the end past
/// `attempts` and the ordered stream's two) contains it, byte for byte.
const FILTERED_LUA: &str = r#"
local cmd, from, to = ARGV[1], ARGV[2], ARGV[3]
local want, max, text, budget = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local names = {'origin_stream', 'origin_id', 'origin_group', 'origin_consumer',
               'delivery_count', 'error', 'failed_at_ms'}
local out, matched, scanned, last = {}, 0, 0, ''
while scanned < budget do
  local rows = redis.call(cmd, KEYS[1], from, to, 'COUNT', 100)
  for _, row in ipairs(rows) do
    scanned = scanned + 1
    last = row[1]
    local f = row[2]
    local n = #f
    -- The appended pairs end the entry: seven, then `attempts` when the
    -- move recorded failed runs, then `order_key` and `on_key_failure` for
    -- an ordered stream's entry.
    if n >= 18 and f[n - 3] == 'order_key' and f[n - 1] == 'on_key_failure' then n = n - 4 end
    if n >= 16 and f[n - 1] == 'attempts' and f[n - 3] == 'failed_at_ms' then n = n - 2 end
    local ok = text == ''
    if not ok and n >= 14 then
      ok = true
      for i = 1, 7 do
        if f[n - 15 + 2 * i] ~= names[i] then ok = false end
      end
      ok = ok and string.find(f[n - 2], text, 1, true) ~= nil
    end
    if ok then
      matched = matched + 1
      if want > 0 then
        for i = 2, #f, 2 do
          local v = f[i]
          if #v > max then
            f[i] = string.sub(v, 1, max) .. ' … (' .. #v .. ' bytes in all)'
          end
        end
        out[#out + 1] = row
        if #out >= want then return {out, matched, last, 0} end
      end
    end
  end
  if #rows < 100 then return {out, matched, last, 1} end
  from = '(' .. last
end
return {out, matched, last, 0}
"#;

static FILTERED: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FILTERED_LUA));

/// Entries one call of the filtering script looks at, at most.
const SCAN_BUDGET: usize = 1000;

/// One call of the filtering script, read apart.
struct Filtered {
    rows: Value,
    matched: u64,
    last: String,
    exhausted: bool,
}

impl Admin {
    /// For pages that show entries: `count` entries of `stream` from
    /// `start` to `end` (`XRANGE`, or `XREVRANGE` with `newest_first`: then
    /// `start` is the upper bound), every field value longer than
    /// `max_bytes` cut on the server to that many bytes plus ` … (<n> bytes
    /// in all)`. A missing key has none.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key is not a stream or a bound is
    /// malformed; a connection error.
    pub async fn preview(
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

    /// For the dead-letter page: up to `count` dead letters of `dlq`
    /// between `from` and `to` (`XRANGE` bounds; with `newest_first`,
    /// `XREVRANGE`, `from` the upper bound) whose appended error contains
    /// `error` (any when empty), values cut to `max_bytes` as
    /// [`preview`](Self::preview) does. The filter runs in a Lua script, at
    /// most 1000 entries per call, and only the matches are sent. Answers
    /// them in the order read, and whether the range was exhausted.
    ///
    /// # Errors
    /// As [`preview`](Self::preview).
    pub async fn dead_letters_filtered(
        &self,
        dlq: &str,
        (from, to): (&str, &str),
        newest_first: bool,
        error: &str,
        count: usize,
        max_bytes: usize,
    ) -> Result<(Vec<DeadLetter>, bool), Error> {
        let mut out = Vec::new();
        let mut from = from.to_owned();
        loop {
            let call = self
                .filtered(
                    dlq,
                    (&from, to),
                    newest_first,
                    error,
                    count - out.len(),
                    max_bytes,
                )
                .await?;
            out.extend(
                super::stream_entries(call.rows, "filter script reply")?
                    .into_iter()
                    .map(|e| super::dead_letters::split(e.id, e.fields)),
            );
            if call.exhausted || out.len() >= count || call.last.is_empty() {
                return Ok((out, call.exhausted));
            }
            from = format!("({}", call.last);
        }
    }

    /// How many dead letters of `dlq` between `from` and `to` have an
    /// appended error containing `error` (any when empty): counted in a Lua
    /// script, 1000 entries a call, nothing but the count sent.
    ///
    /// # Errors
    /// As [`preview`](Self::preview).
    pub async fn count_dead_letters(
        &self,
        dlq: &str,
        (from, to): (&str, &str),
        error: &str,
    ) -> Result<u64, Error> {
        let mut total = 0;
        let mut from = from.to_owned();
        loop {
            let call = self.filtered(dlq, (&from, to), false, error, 0, 0).await?;
            total += call.matched;
            if call.exhausted || call.last.is_empty() {
                return Ok(total);
            }
            from = format!("({}", call.last);
        }
    }

    async fn filtered(
        &self,
        dlq: &str,
        (from, to): (&str, &str),
        newest_first: bool,
        error: &str,
        want: usize,
        max_bytes: usize,
    ) -> Result<Filtered, Error> {
        let mut call = FILTERED.key(dlq);
        call.arg(if newest_first { "XREVRANGE" } else { "XRANGE" })
            .arg(from)
            .arg(to)
            .arg(want)
            .arg(max_bytes)
            .arg(error)
            .arg(SCAN_BUDGET);
        let mut conn = self.conn.clone();
        let v: Value = call
            .invoke_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        let bad = |m: &str| Error::unparsable("filter script reply", m.to_owned());
        let Value::Array(mut parts) = v else {
            return Err(bad("not an array"));
        };
        if parts.len() != 4 {
            return Err(bad("not 4 items"));
        }
        let exhausted = matches!(parts[3], Value::Int(1));
        let matched = match parts[1] {
            Value::Int(n) => n.max(0) as u64,
            _ => return Err(bad("the count is not an integer")),
        };
        let last = crate::redis::info::text(&parts[2]).unwrap_or_default();
        let rows = parts.swap_remove(0);
        Ok(Filtered {
            rows,
            matched,
            last,
            exhausted,
        })
    }

    /// Deletes the entries `ids` of `stream` (`XDEL`, 100 ids a call);
    /// answers how many were there.
    ///
    /// # Errors
    /// As [`preview`](Self::preview) (pages deleted before an error stay
    /// deleted).
    pub async fn delete(&self, stream: &str, ids: &[EntryId]) -> Result<u64, Error> {
        let mut deleted = 0;
        for page in ids.chunks(100) {
            let mut cmd = redis::cmd("XDEL");
            cmd.arg(stream);
            for id in page {
                cmd.arg(id.as_str());
            }
            let n: u64 = redis::from_redis_value(self.query(&cmd).await?)
                .map_err(|e| Error::unparsable("XDEL reply", e.to_string()))?;
            deleted += n;
        }
        Ok(deleted)
    }

    /// Appends an entry to `stream`, keeping about `keep` entries: `XADD
    /// <stream> MAXLEN ~ <keep> * <field> <value> …`.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key holds another type; a connection error.
    pub async fn add_capped(
        &self,
        stream: &str,
        keep: usize,
        fields: &[(&str, String)],
    ) -> Result<EntryId, Error> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream).arg("MAXLEN").arg("~").arg(keep).arg("*");
        for (k, v) in fields {
            cmd.arg(*k).arg(v);
        }
        let id: String = redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("XADD reply", e.to_string()))?;
        Ok(EntryId(id))
    }
}
