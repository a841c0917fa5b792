//! `dlq redrive`: dead letters back onto their origin streams, one at a
//! time, after checking that something will read them there and asking;
//! progress on stderr, and Ctrl-C stops it between two dead letters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rillkit::admin::{Admin, DeadLetter, DeadLetterFilter, RedriveReport};
use serde_json::json;

use crate::cli::Select;
use crate::dlq::dead_letter_stream;
use crate::operator::{Interrupt, confirm};
use crate::output::{print_json, table, text};
use crate::{Ctx, Failure};

/// How often a long redrive says how far it is.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The flags of `dlq redrive` beside the selection.
pub struct Options<'a> {
    pub dry_run: bool,
    pub create_group: Option<&'a str>,
    pub yes: bool,
}

/// Whether anything would read what is redriven to an origin stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Readers {
    /// The stream has this many consumer groups.
    Groups(usize),
    /// The stream exists and has no group.
    NoGroup,
    /// There is no such key (deleted).
    NoStream,
    /// The key holds another type: the redrive skips its dead letters.
    NotAStream,
}

impl Readers {
    async fn of(admin: &Admin, stream: &str) -> Result<Readers, Failure> {
        match admin.groups(stream).await {
            Ok(g) if g.is_empty() => Ok(Readers::NoGroup),
            Ok(g) => Ok(Readers::Groups(g.len())),
            Err(e) => match admin.stream_len(stream).await {
                // XINFO GROUPS fails for a missing key, XLEN answers 0.
                Ok(0) => Ok(Readers::NoStream),
                Ok(_) => Err(e.into()),
                Err(_) => Ok(Readers::NotAStream),
            },
        }
    }

    /// Nothing would read entries added there.
    fn unread(self) -> bool {
        matches!(self, Readers::NoGroup | Readers::NoStream)
    }

    fn label(self) -> &'static str {
        match self {
            Readers::Groups(_) => "ok",
            Readers::NoGroup => "no_group",
            Readers::NoStream => "no_stream",
            Readers::NotAStream => "not_a_stream",
        }
    }

    fn describe(self) -> String {
        match self {
            Readers::Groups(1) => "1 group".into(),
            Readers::Groups(n) => {
                format!("{n} groups; each dead letter runs again in its origin group only")
            }
            Readers::NoGroup => "exists, no consumer group".into(),
            Readers::NoStream => "does not exist (deleted?)".into(),
            Readers::NotAStream => "not a stream: its dead letters are skipped".into(),
        }
    }
}

/// An origin stream of the selected dead letters.
struct Origin {
    /// Selected dead letters from it.
    count: usize,
    /// The group the first of them failed in.
    group: String,
    readers: Readers,
}

/// The dead-letter streams a redrive reads: `--dlq`; for the base name of a
/// stream ordered by key (a recorded partition count), every partition's,
/// each redriven into its own partition; else the stream's.
async fn sources(admin: &Admin, select: &Select) -> Result<Vec<String>, Failure> {
    if select.dlq.is_none() && admin.partitions(&select.stream).await?.is_some() {
        return Ok(admin.dead_letter_streams(&select.stream).await?);
    }
    Ok(vec![
        dead_letter_stream(admin, &select.stream, select.dlq.as_deref()).await?,
    ])
}

/// The dead letters `select` picks from `dlqs`, each with its dead-letter
/// stream: a stream's in its order; from several, merged by dead-letter id
/// (each stream's order kept) and cut to `--count` in all.
async fn selection(
    admin: &Admin,
    dlqs: &[String],
    select: &Select,
) -> Result<Vec<(String, DeadLetter)>, Failure> {
    let filter = select.filter(None);
    let mut selected = Vec::new();
    for dlq in dlqs {
        for d in admin.dead_letters(dlq, &filter).await? {
            selected.push((dlq.clone(), d));
        }
    }
    if dlqs.len() > 1 {
        selected.sort_by_key(|(_, d)| d.id.parts());
        if let Some(n) = select.count {
            selected.truncate(n);
        }
    }
    Ok(selected)
}

/// The dead-letter streams as one name for messages: `a-dlq` or `a:p0-dlq, a:p1-dlq`.
fn label(dlqs: &[String]) -> String {
    dlqs.join(", ")
}

/// The JSON members naming the dead-letter streams: `dlq` (the one, or null
/// for several) and `dlqs` (every one).
fn dlq_members(dlqs: &[String]) -> (serde_json::Value, serde_json::Value) {
    let one = match dlqs {
        [one] => json!(one),
        _ => serde_json::Value::Null,
    };
    (one, json!(dlqs))
}

pub async fn redrive(ctx: &Ctx, select: &Select, opts: Options<'_>) -> Result<(), Failure> {
    let admin = &ctx.admin;
    let dlqs = sources(admin, select).await?;
    let from = label(&dlqs);
    let selected = selection(admin, &dlqs, select).await?;
    let mut origins: BTreeMap<String, Origin> = BTreeMap::new();
    for o in selected.iter().filter_map(|(_, d)| d.origin.as_ref()) {
        origins
            .entry(o.stream.clone())
            .or_insert_with(|| Origin {
                count: 0,
                group: o.group.clone(),
                readers: Readers::NotAStream,
            })
            .count += 1;
    }
    for (name, o) in &mut origins {
        o.readers = Readers::of(admin, name).await?;
    }
    if opts.dry_run {
        print_dry_run(ctx, &dlqs, &selected, &origins, opts.create_group);
        return Ok(());
    }
    if selected.is_empty() {
        if ctx.json {
            let (dlq, all) = dlq_members(&dlqs);
            print_json(&json!({ "dlq": dlq, "dlqs": all, "redriven": [], "skipped": [] }));
        } else {
            say!("no dead letters to redrive in {}", text(from.as_bytes()));
        }
        return Ok(());
    }
    let unread: Vec<(&String, &Origin)> =
        origins.iter().filter(|(_, o)| o.readers.unread()).collect();
    if !unread.is_empty() && opts.create_group.is_none() {
        return Err(Failure::NotFound(refusal(&unread)));
    }
    let to: Vec<String> = origins.keys().map(|s| format!("{s:?}")).collect();
    let quoted: Vec<String> = dlqs.iter().map(|d| format!("{d:?}")).collect();
    let what = format!(
        "redrive {} dead letter(s) from {} to {}",
        selected.len(),
        quoted.join(", "),
        to.join(", ")
    );
    confirm(opts.yes, &what, &format!("would {what}"))?;
    if let Some(group) = opts.create_group {
        for (name, _) in &unread {
            // `$`: the group reads what is added from now on, which is what
            // the redrive adds.
            admin.create_group(name, group, "$").await?;
            eprintln!(
                "rillkit: created group {} on {} (at $)",
                text(group.as_bytes()),
                text(name.as_bytes())
            );
        }
    }
    let interrupt = Interrupt::watch()?;
    let mut done = Done::default();
    let mut said = Instant::now();
    for (dlq, d) in &selected {
        if interrupt.requested() {
            break;
        }
        // One at a time, oldest first: the order they failed in, which
        // for a key of an ordered stream is its entries' order.
        let one = DeadLetterFilter::new().with_id(d.id.as_str());
        let report = match admin.redrive(dlq, &one).await {
            Ok(r) => r,
            Err(e) => {
                done.summary(ctx, &dlqs, selected.len(), false);
                return Err(e.into());
            }
        };
        done.record(ctx, dlq, d, report);
        if said.elapsed() >= PROGRESS_EVERY {
            said = Instant::now();
            eprintln!(
                "rillkit: redriving from {}: {}/{} done",
                text(from.as_bytes()),
                done.attempted(),
                selected.len()
            );
        }
    }
    let interrupted = interrupt.requested() && done.attempted() < selected.len();
    done.summary(ctx, &dlqs, selected.len(), interrupted);
    if interrupted {
        return Err(Failure::Interrupted(format!(
            "interrupted: redrove {} of {} dead letter(s), skipped {}, {} left in {}",
            done.redriven.len(),
            selected.len(),
            done.skipped.len(),
            selected.len() - done.attempted(),
            quoted.join(", ")
        )));
    }
    if done.redriven.is_empty() && !done.skipped.is_empty() {
        return Err(Failure::NothingDone(done.all_skipped(&from)));
    }
    Ok(())
}

/// One dead letter put back.
struct Moved {
    dlq: String,
    dead_letter: String,
    stream: String,
    id: String,
    /// The group it runs again in.
    group: String,
    /// The key whose `fail_rest` mark the redrive deleted.
    lifted_mark: Option<Vec<u8>>,
}

/// What the redrive did so far, in order.
#[derive(Default)]
struct Done {
    redriven: Vec<Moved>,
    /// `(dead-letter stream, dead letter id, reason)`.
    skipped: Vec<(String, String, String)>,
}

impl Done {
    fn attempted(&self) -> usize {
        self.redriven.len() + self.skipped.len()
    }

    /// Takes in the outcome for `d` of `dlq`; in text, prints its line at
    /// once.
    fn record(&mut self, ctx: &Ctx, dlq: &str, d: &DeadLetter, report: RedriveReport) {
        let before = self.attempted();
        for r in report.redriven {
            if !ctx.json {
                let lifted = r.lifted_mark.as_ref().map_or(String::new(), |k| {
                    format!(" (the fail_rest mark of key {} deleted)", text(k))
                });
                say!(
                    "{} -> {} {} (group {}){lifted}",
                    r.dead_letter,
                    text(r.stream.as_bytes()),
                    text(r.id.as_str().as_bytes()),
                    text(r.group.as_bytes())
                );
            }
            self.redriven.push(Moved {
                dlq: dlq.to_owned(),
                dead_letter: r.dead_letter.as_str().to_owned(),
                stream: r.stream,
                id: r.id.as_str().to_owned(),
                group: r.group,
                lifted_mark: r.lifted_mark,
            });
        }
        let mut skipped: Vec<(String, String)> = report
            .skipped
            .into_iter()
            .map(|s| (s.id.as_str().to_owned(), s.reason))
            .collect();
        if self.attempted() == before && skipped.is_empty() {
            skipped.push((
                d.id.as_str().to_owned(),
                "no longer in the dead-letter stream".into(),
            ));
        }
        for (id, reason) in skipped {
            if !ctx.json {
                say!("{id} skipped: {}", text(reason.as_bytes()));
            }
            self.skipped.push((dlq.to_owned(), id, reason));
        }
    }

    /// Why nothing was redriven: each reason with how many it kept back.
    fn all_skipped(&self, from: &str) -> String {
        let mut reasons: Vec<(&str, usize)> = Vec::new();
        for (_, _, reason) in &self.skipped {
            match reasons.iter_mut().find(|(r, _)| *r == reason.as_str()) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason, 1)),
            }
        }
        let why: Vec<String> = reasons
            .iter()
            .map(|(reason, n)| format!("{n} because {reason}"))
            .collect();
        format!(
            "nothing redriven: every one of the {} selected dead letter(s) was skipped and stays in {from}: {}",
            self.skipped.len(),
            why.join("; ")
        )
    }

    /// The last word, interrupted or not: the JSON document, or the count.
    fn summary(&self, ctx: &Ctx, dlqs: &[String], selected: usize, interrupted: bool) {
        let left = selected - self.attempted();
        if ctx.json {
            let redriven: Vec<_> = self
                .redriven
                .iter()
                .map(|m| {
                    json!({
                        "dlq": m.dlq,
                        "dead_letter": m.dead_letter,
                        "stream": m.stream,
                        "id": m.id,
                        "group": m.group,
                        "lifted_mark": m.lifted_mark.as_ref().map(|k| String::from_utf8_lossy(k)),
                    })
                })
                .collect();
            let skipped: Vec<_> = self
                .skipped
                .iter()
                .map(|(dlq, id, reason)| json!({ "dlq": dlq, "id": id, "reason": reason }))
                .collect();
            let (dlq, all) = dlq_members(dlqs);
            print_json(&json!({
                "dlq": dlq,
                "dlqs": all,
                "redriven": redriven,
                "skipped": skipped,
                "not_attempted": left,
                "interrupted": interrupted,
            }));
            return;
        }
        let mut line = format!(
            "redrove {} dead letter(s) from {}, skipped {}",
            self.redriven.len(),
            text(label(dlqs).as_bytes()),
            self.skipped.len()
        );
        if left > 0 {
            line.push_str(&format!(
                "; {left} not attempted{}",
                if interrupted { " (interrupted)" } else { "" }
            ));
        }
        say!("{line}");
    }
}

/// Why a redrive is refused: origin streams nothing would read.
fn refusal(unread: &[(&String, &Origin)]) -> String {
    let list: Vec<String> = unread
        .iter()
        .map(|(name, o)| {
            format!(
                "{name:?} {} (its {} dead letter(s) failed in group {:?})",
                o.readers.describe(),
                o.count,
                o.group
            )
        })
        .collect();
    let group = unread.first().map_or("GROUP", |(_, o)| o.group.as_str());
    format!(
        "nothing redriven: no consumer group would read the redriven entries on {}. \
         Recreate the group first (--create-group {group:?} creates it at $ so it reads what \
         the redrive adds, as XGROUP CREATE <stream> {group:?} $ MKSTREAM), or leave those \
         dead letters out (--start, --end, --error)",
        list.join("; ")
    )
}

fn print_dry_run(
    ctx: &Ctx,
    dlqs: &[String],
    selected: &[(String, DeadLetter)],
    origins: &BTreeMap<String, Origin>,
    create_group: Option<&str>,
) {
    let from = label(dlqs);
    if ctx.json {
        let letters: Vec<_> = selected
            .iter()
            .map(|(dlq, d)| {
                json!({
                    "dlq": dlq,
                    "id": d.id.as_str(),
                    "origin_stream": d.origin.as_ref().map(|o| o.stream.as_str()),
                    "origin_id": d.origin.as_ref().map(|o| o.id.as_str()),
                    "origin_group": d.origin.as_ref().map(|o| o.group.as_str()),
                })
            })
            .collect();
        let streams: Vec<_> = origins
            .iter()
            .map(|(name, o)| {
                json!({
                    "stream": name,
                    "dead_letters": o.count,
                    "readers": o.readers.label(),
                })
            })
            .collect();
        let (dlq, all) = dlq_members(dlqs);
        print_json(&json!({
            "dlq": dlq,
            "dlqs": all,
            "dry_run": true,
            "would_redrive": selected.len(),
            "dead_letters": letters,
            "origins": streams,
        }));
        return;
    }
    let rows: Vec<Vec<String>> = selected
        .iter()
        .map(|(_, d)| match &d.origin {
            Some(o) => vec![
                d.id.to_string(),
                o.stream.clone(),
                o.id.to_string(),
                o.group.clone(),
            ],
            None => vec![
                d.id.to_string(),
                "(not a rillkit dead letter: skipped)".into(),
                "-".into(),
                "-".into(),
            ],
        })
        .collect();
    if !rows.is_empty() {
        say_inline!(
            "{}",
            table(
                &["DEAD-LETTER", "ORIGIN", "ORIGIN-ID", "GROUP"],
                &rows,
                ctx.cap
            )
        );
    }
    for (name, o) in origins {
        let then = match (o.readers.unread(), create_group) {
            (false, _) => String::new(),
            (true, Some(g)) => format!("; group {g:?} would be created (at $)"),
            (true, None) => format!(
                "; refused without --create-group (its dead letters failed in {:?})",
                o.group
            ),
        };
        let line = format!(
            "to {name:?}: {} dead letter(s); {}{then}",
            o.count,
            o.readers.describe()
        );
        say!("{}", text(line.as_bytes()));
    }
    say!(
        "dry run: would redrive {} dead letter(s) from {}; nothing changed",
        selected.len(),
        text(from.as_bytes())
    );
}
