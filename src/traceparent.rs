//! W3C Trace Context's `traceparent` (<https://www.w3.org/TR/trace-context/>),
//! carried in an entry's `traceparent` field from the publisher to the
//! consumer's `rillkit.handle` span, and how that span relates to the
//! publisher's ([`TraceLinking`]).

use std::fmt;
use std::str::FromStr;

/// The entry field that carries a [`TraceParent`].
pub const TRACEPARENT_FIELD: &str = "traceparent";

/// A W3C `traceparent` value: `<version>-<trace-id>-<parent-id>-<flags>`,
/// lower-case hex of 2, 32, 16 and 2 digits, for example
/// `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`.
///
/// Publish one with
/// [`Broker::publish_traced`](crate::Broker::publish_traced): the entry
/// gets a `traceparent` field beside its data, and the consumer's
/// `rillkit.handle` span records it (field `traceparent`), so a trace
/// backend or a log search joins the handler's lines to the publisher's
/// trace. A handler reads it with [`TraceParent::of`].
///
/// ```
/// use rillkit::TraceParent;
///
/// let tp: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse()?;
/// assert_eq!(tp.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert!(tp.sampled());
/// assert!("00-0000-00f067aa0ba902b7-01".parse::<TraceParent>().is_err());
/// # Ok::<(), rillkit::InvalidTraceParent>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceParent(String);

/// How a stream consumer's process span (`rillkit.handle`, OpenTelemetry
/// name `process <stream>`) relates to the producer's span that an entry's
/// `traceparent` field names. Set per subscription with
/// [`ConsumerOptions::with_trace_linking`](crate::ConsumerOptions::with_trace_linking).
///
/// It takes effect with feature `otel` and the application's
/// `tracing-opentelemetry` layer; without them no span is linked or parented
/// and the option changes nothing. Entries without a valid `traceparent`
/// start their own trace either way.
///
/// | value | the process span | OpenTelemetry call |
/// |-------|------------------|--------------------|
/// | [`Link`](Self::Link) (default) | starts its own trace and carries a span link to the producer's span | `OpenTelemetrySpanExt::add_link` |
/// | [`Parent`](Self::Parent) | is a child of the producer's span, in the producer's trace | `OpenTelemetrySpanExt::set_parent` |
///
/// A link is what the OpenTelemetry messaging conventions recommend: an
/// entry may be handled long after it was published, redelivered, or
/// handled in a batch with entries of other traces, and a trace that stays
/// open until then is hard to read. A batch handler's span
/// (`rillkit.handle_batch`) links to each entry's producer span; with
/// `Parent` it is a child of the first entry's producer span and links to
/// the others.
///
/// ```
/// use rillkit::{ConsumerOptions, TraceLinking};
///
/// let opts = ConsumerOptions::default().with_trace_linking(TraceLinking::Parent);
/// assert_eq!(opts.trace_linking(), TraceLinking::Parent);
/// assert_eq!(ConsumerOptions::default().trace_linking(), TraceLinking::Link);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TraceLinking {
    /// A span link to the producer's span; the process span is the root of
    /// its own trace.
    #[default]
    Link,
    /// The producer's span is the process span's (remote) parent.
    Parent,
}

/// A value that is not a W3C `traceparent`; says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a W3C traceparent ({reason}): {value:?}")]
#[non_exhaustive]
pub struct InvalidTraceParent {
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl TraceParent {
    /// Builds one from a trace id (32 hex digits), a parent span id (16 hex
    /// digits) and whether the trace is sampled (flags `01`, else `00`),
    /// version `00`.
    ///
    /// # Errors
    /// [`InvalidTraceParent`] when an id has the wrong length, is not
    /// lower-case hex, or is all zeros.
    pub fn new(
        trace_id: &str,
        parent_id: &str,
        sampled: bool,
    ) -> Result<TraceParent, InvalidTraceParent> {
        format!(
            "00-{trace_id}-{parent_id}-{}",
            if sampled { "01" } else { "00" }
        )
        .parse()
    }

    /// The entry's `traceparent` field, when it has one that parses.
    pub fn of(msg: &crate::Message) -> Option<TraceParent> {
        std::str::from_utf8(msg.field(TRACEPARENT_FIELD)?)
            .ok()?
            .parse()
            .ok()
    }

    /// The 32-hex-digit trace id.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The 16-hex-digit id of the span that published the entry.
    pub fn parent_id(&self) -> &str {
        &self.0[36..52]
    }

    /// Whether the sampled flag (bit 0 of the flags) is set.
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.0[53..55], 16).is_ok_and(|f| f & 1 == 1)
    }

    /// The value as it goes on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TraceParent {
    type Err = InvalidTraceParent;

    /// Parses version `00` exactly, and a later version's first four parts
    /// (the spec's forward compatibility), keeping only those.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| InvalidTraceParent {
            value: s.to_owned(),
            reason,
        };
        let hex = |p: &str| p.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let parts: Vec<&str> = s.split('-').collect();
        let [version, trace, parent, flags, rest @ ..] = parts.as_slice() else {
            return Err(bad("expected version-traceid-parentid-flags"));
        };
        if version.len() != 2 || !hex(version) || *version == "ff" {
            return Err(bad("the version is not 2 hex digits below ff"));
        }
        if *version == "00" && !rest.is_empty() {
            return Err(bad("version 00 has exactly four parts"));
        }
        if trace.len() != 32 || !hex(trace) || trace.bytes().all(|b| b == b'0') {
            return Err(bad(
                "the trace id is not 32 lower-case hex digits, not all zero",
            ));
        }
        if parent.len() != 16 || !hex(parent) || parent.bytes().all(|b| b == b'0') {
            return Err(bad(
                "the parent id is not 16 lower-case hex digits, not all zero",
            ));
        }
        if flags.len() != 2 || !hex(flags) {
            return Err(bad("the flags are not 2 hex digits"));
        }
        Ok(TraceParent(format!("{version}-{trace}-{parent}-{flags}")))
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests;
