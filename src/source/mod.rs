//! The kinds of source a subscription reads: Redis streams ([`stream`]),
//! lists ([`list`]) and Pub/Sub channels ([`channel`]), and [`Source`], one
//! configured subscription of any kind, as the supervisor starts it (a
//! subscription added at run time, by the broker, is one too).
//!
//! Each kind reads on a dedicated connection of its own and runs the same
//! way as a stream's consumer: an actor whose loop reads, runs up to
//! `concurrency` handlers, drains on a stop within the deadline and reports a
//! `ConsumerReport` the supervisor tallies.

pub(crate) mod channel;
pub(crate) mod list;
pub(crate) mod stream;

use std::sync::Arc;

use crate::kind::SourceKind;
use crate::status::Board;
use stream::Subscription;

/// One configured subscription of any kind.
#[derive(Clone)]
pub(crate) enum Source {
    Stream(Arc<Subscription>),
    List(Arc<list::ListSub>),
    Channel(Arc<channel::ChannelSub>),
}

impl Source {
    pub(crate) fn board(&self) -> &Arc<Board> {
        match self {
            Source::Stream(s) => &s.board,
            Source::List(s) => &s.board,
            Source::Channel(s) => &s.board,
        }
    }

    pub(crate) fn as_stream(&self) -> Option<&Arc<Subscription>> {
        match self {
            Source::Stream(s) => Some(s),
            _ => None,
        }
    }
}
