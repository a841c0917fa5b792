//! Running an entry's handler through the delivery core, and what its end
//! means: an XACK after success, a retry after its backoff, or the
//! dead-letter stream (rejected, undecodable, or out of runs).

use futures::FutureExt;
use futures::future::LocalBoxFuture;

use super::batch::Ended;
use super::{Finished, Loop, Queued};
use crate::delivery::handler;
use crate::delivery::handler::{Ran, Run, Verdict, Why};
use crate::delivery::liveness::WhileHeld;
use crate::handler::{Message, Prepared};
use crate::source::stream::StreamHandler;

impl Loop {
    /// Runs one entry's handler (`alone`: nothing else starts until it
    /// ends), or sends it to the DLQ if it cannot run. Answers whether a
    /// handler started.
    pub(super) fn start(&mut self, q: Queued, alone: bool) -> bool {
        let handler = match &self.sub.handler {
            StreamHandler::Each(h) => h.clone(),
            // An entry of a batch handler runs as a batch of its own.
            StreamHandler::Batch(_) => return self.start_batch(vec![q], alone),
        };
        let Queued {
            id,
            fields,
            delivery_count,
            retried_here: _,
            key: _,
        } = q;
        let s = &self.sub;
        let msg = Message {
            id,
            stream: s.names.name.clone(),
            group: s.names.group.clone(),
            consumer: s.consumer.clone(),
            delivery_count,
            fields: fields.into(),
            data_field: s.names.field.clone(),
        };
        if let Some(why) = self.key_marked(&msg.id) {
            tracing::warn!(stream = %msg.stream, id = %msg.id, reason = %why, "an earlier entry of this key was dead-lettered; moving this one after it");
            self.dead_letter_for_mark(msg, why);
            return false;
        }
        let s = &self.sub;
        if let Some(err) = handler::out_of_runs(delivery_count, s.opts.max_retries) {
            tracing::warn!(
                stream = %msg.stream, id = %msg.id, delivery_count, error = %err,
                "entry had all its runs without finishing; moving it to the dead-letter stream"
            );
            self.dead_letter(msg, err);
            return false;
        }
        // The handler runs inside a span carrying the delivery, so the
        // application's own log lines in it name the entry; `otel.*` and
        // `messaging.*` make it an OpenTelemetry messaging process span.
        let span = crate::telemetry::process_span!(
            "rillkit.handle",
            destination = msg.stream,
            client = msg.consumer,
            base {
                stream = %msg.stream,
                group = %msg.group,
                consumer = %msg.consumer,
                entry_id = %msg.id,
                delivery_count = msg.delivery_count,
                traceparent = tracing::field::Empty,
            },
            otel {
                "messaging.destination.name" = %msg.stream,
                "messaging.consumer.group.name" = %msg.group,
                "messaging.message.id" = %msg.id,
                // Signed: OpenTelemetry has no unsigned attribute (a u64
                // would export as a string).
                "messaging.redis.delivery_count" = i64::try_from(msg.delivery_count).unwrap_or(i64::MAX),
            },
        );
        if let Some(tp) = msg.field(crate::traceparent::TRACEPARENT_FIELD) {
            // Recorded as sent (lossy UTF-8): a malformed value still helps
            // a search, and parsing is the reader's business.
            span.record(
                "traceparent",
                tracing::field::display(String::from_utf8_lossy(tp)),
            );
            #[cfg(feature = "otel")]
            if let Some(tp) = std::str::from_utf8(tp)
                .ok()
                .and_then(|t| t.parse::<crate::TraceParent>().ok())
            {
                crate::otel::follow(&span, &tp, s.opts.trace_linking);
            }
        }
        let made = handler::start(span, || match handler(&msg) {
            Prepared::Run(fut) => Ok(fut),
            Prepared::Undeliverable(why) => Err(why.to_string()),
        });
        match made {
            Ok(running) => {
                if msg.delivery_count > 1 {
                    self.metrics.redelivered.increment(1);
                }
                let running = running.map(move |run| Finished { msg, run }.into());
                self.run(running.boxed_local(), alone);
                true
            }
            Err(Run {
                ran: Ran::Undecodable(why),
                ..
            }) => {
                tracing::warn!(stream = %msg.stream, id = %msg.id, reason = %why, "entry cannot be handled; moving it to the dead-letter stream");
                self.dead_letter(msg, why);
                false
            }
            Err(run) => {
                self.on_finished(Finished { msg, run });
                false
            }
        }
    }

    /// Runs a handler's future (an entry's or a batch's; `alone`: nothing
    /// else starts until it ends). A partition's runs only while its lease
    /// holds.
    pub(super) fn run(&mut self, running: LocalBoxFuture<'static, Ended>, alone: bool) {
        if self.fence.is_some() {
            let until = self.lease.until();
            self.handlers
                .push(Box::pin(WhileHeld::new(running, until)), alone);
        } else {
            self.handlers.push(running, alone);
        }
    }

    pub(super) fn on_finished(&mut self, Finished { msg, run }: Finished) {
        // A redelivery that ran alone is done (nothing runs beside it).
        self.handlers.finished(run.ended, run.took);
        handler::tally(&self.metrics, &self.sub.board, &run);
        if let Ran::Failed {
            error,
            panicked: true,
            ..
        } = &run.ran
        {
            tracing::error!(stream = %msg.stream, id = %msg.id, error = %error, "handler panicked");
        }
        let (count, max_retries) = (msg.delivery_count, self.sub.opts.max_retries);
        match run.ran.verdict(count, max_retries, true) {
            Verdict::Settle => {
                self.metrics.record_end_to_end(&msg.id);
                // Stays held, and keeps its key, until the XACK is done
                // (see `on_acked`): a crash before that runs it again, and
                // that run must come before its key's next entry.
                self.acks.push(msg.id);
            }
            Verdict::DeadLetter { error, why } => {
                self.retries.failed(&msg.id, count, &error);
                let (stream, id) = (&msg.stream, &msg.id);
                match why {
                    Why::Rejected => {
                        tracing::warn!(%stream, %id, %error, "handler rejected entry; moving it to the dead-letter stream")
                    }
                    Why::Undecodable => {
                        tracing::warn!(%stream, %id, reason = %error, "entry cannot be handled; moving it to the dead-letter stream")
                    }
                    Why::LastRun | Why::NoRetry => tracing::warn!(
                        %stream, %id, delivery_count = count, %error,
                        "handler failed on its last run; moving the entry to the dead-letter stream"
                    ),
                }
                self.dead_letter(msg, error);
            }
            Verdict::Retry { error } => {
                self.retries.failed(&msg.id, count, &error);
                let (stream, id, delivery_count) =
                    (msg.stream.clone(), msg.id.clone(), msg.delivery_count);
                let wait = self.schedule_retry(msg);
                tracing::warn!(
                    %stream, %id, delivery_count, error = %error, retry_in_ms = wait.as_millis() as u64,
                    "handler failed; the entry runs again after its backoff"
                );
            }
        }
    }
}
