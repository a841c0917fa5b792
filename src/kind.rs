//! [`SourceKind`]: what a subscription reads, named by errors, the status
//! and the metrics alike.

/// What a subscription reads: a stream (consumer groups), a list, or a
/// Pub/Sub channel. See the guide's "Sources" table for what each kind
/// guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceKind {
    /// A stream read in a consumer group (`XREADGROUP`): at least once.
    Stream,
    /// A list popped onto a processing list (`BLMOVE`, `LREM` after
    /// success): at least once.
    List,
    /// A list popped with `BRPOP`: at most once.
    ListAtMostOnce,
    /// A Pub/Sub channel or pattern (`SUBSCRIBE`, `PSUBSCRIBE`): at most
    /// once.
    Channel,
}
