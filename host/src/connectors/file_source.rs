//! The file source: one record per line of text files, read in parallel by byte ranges.
//!
//! Every file is cut into *splits* of `split_size` bytes. As in Hadoop's `LineRecordReader`,
//! a line belongs to the split in which its first byte lies: a split that starts at offset
//! `start > 0` skips everything up to and including the first `\n` at or after `start - 1`,
//! and reads lines while they start before its end, finishing the last one past the end if
//! needed. Splits are numbered in file order, then by offset; split `k` goes to subtask
//! `k % parallelism`.
//!
//! A subtask reads its splits one after the other, unless the source stamps records with
//! event time from a field of each line (`event_time`). Then it reads a batch from each of
//! its splits, and from then on always from the split furthest behind in event time, and its
//! watermark follows that split (Flink's watermark alignment of splits): read one after the
//! other, a split that starts earlier in event time than the previous one ended (the next
//! day's file before the last hour of this one, say) would find the watermark past its
//! records, and they would all be late; read in turn, the byte ranges of one file in time
//! order would each be at another time, and windows downstream would stay open from the
//! first range's time to the last's (a key's windows of the whole file at once).

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use weir_wire::Kind;

use super::{ConnectorError, Poll, Source, SourcePosition, SplitTime, resolve, resolved_note};
use crate::batch::{BATCH_BYTES, Batch};

const DEFAULT_SPLIT_SIZE: u64 = 64 << 20;
const READ_BUFFER: usize = 1 << 20;

/// `type = "file"`: one record per line of one or more text files.
///
/// A record's value is the line without its `\n` or `\r\n`; records have no key, and a
/// timestamp only with `event_time`. Exactly one of `path` and `paths` must be given; a
/// directory stands for all regular files in it whose names do not start with `.`, sorted by
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// A file or directory to read; relative paths are resolved against the job spec's
    /// directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Files or directories to read, in this order (instead of `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<PathBuf>>,
    /// Bytes per split, the unit of parallel reading (default 64 MiB).
    #[serde(default = "default_split_size")]
    pub split_size: u64,
    /// Stamps each record with the event time in a field of its line (see [`LineTime`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time: Option<LineTime>,
}

fn default_split_size() -> u64 {
    DEFAULT_SPLIT_SIZE
}

/// `event_time = { field = 1 }` of a file source: each line's event time is its field
/// `field` (counted from 0), fields being separated by `delimiter`. A line without such a
/// field, or whose field is not a time in `format`, fails the job with an error naming the
/// file, the line's offset and the line.
///
/// ```toml
/// event_time = { field = 0, delimiter = "\t", format = "rfc3339" }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineTime {
    /// Which field holds the time, counted from 0.
    pub field: usize,
    /// The one ASCII character between fields (default `","`).
    #[serde(default = "default_delimiter")]
    pub delimiter: String,
    /// How the time is written (default milliseconds since the Unix epoch).
    #[serde(default)]
    pub format: TimeFormat,
}

fn default_delimiter() -> String {
    ",".to_owned()
}

/// How the time in a line's field is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFormat {
    /// Milliseconds since the Unix epoch, an integer: `1700000000123`.
    #[default]
    EpochMs,
    /// Seconds since the Unix epoch, with up to three decimals: `1700000000.123`.
    EpochS,
    /// RFC 3339 in UTC: `2023-11-14T22:13:20.123Z`.
    Rfc3339,
}

impl LineTime {
    fn validate(&self) -> Result<(), String> {
        match self.delimiter.as_bytes() {
            [b] if b.is_ascii() && *b != b'\n' => Ok(()),
            _ => Err(format!(
                "event_time.delimiter must be one ASCII character other than a newline, not \
                 {:?} (for tab-separated lines write delimiter = \"\\t\")",
                self.delimiter
            )),
        }
    }

    /// The event time of `line`, or why it has none.
    fn parse(&self, line: &[u8]) -> Result<i64, String> {
        let delimiter = self.delimiter.as_bytes()[0];
        let mut fields = line.split(|&b| b == delimiter);
        let Some(field) = fields.nth(self.field) else {
            let n = line.split(|&b| b == delimiter).count();
            return Err(format!(
                "it has {n} field(s) separated by {:?}, so no field {} (counted from 0)",
                self.delimiter, self.field
            ));
        };
        let text = std::str::from_utf8(field)
            .map(str::trim)
            .map_err(|_| format!("field {} is not UTF-8", self.field))?;
        let time = match self.format {
            TimeFormat::EpochMs => text.parse::<i64>().ok(),
            TimeFormat::EpochS => epoch_seconds(text),
            TimeFormat::Rfc3339 => humantime::parse_rfc3339(text).ok().and_then(|t| {
                let ms = match t.duration_since(std::time::UNIX_EPOCH) {
                    Ok(d) => i64::try_from(d.as_millis()).ok()?,
                    Err(e) => -i64::try_from(e.duration().as_millis()).ok()?,
                };
                Some(ms)
            }),
        };
        time.ok_or_else(|| {
            let what = match self.format {
                TimeFormat::EpochMs => "milliseconds since the Unix epoch (an integer)",
                TimeFormat::EpochS => "seconds since the Unix epoch",
                TimeFormat::Rfc3339 => "an RFC 3339 time in UTC such as 2023-11-14T22:13:20Z",
            };
            format!("field {} ({text:?}) is not {what}", self.field)
        })
    }
}

/// `SECONDS[.FRACTION]` with up to three decimals, as milliseconds.
fn epoch_seconds(text: &str) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: i64 = whole.parse().ok()?;
    let ms: i64 = format!("{fraction:0<3}").parse().ok()?;
    let ms = if whole.starts_with('-') { -ms } else { ms };
    seconds.checked_mul(1000)?.checked_add(ms)
}

impl FileSourceConfig {
    /// The configured paths, each named by its setting for messages.
    fn entries(&self) -> Result<Vec<(String, &Path)>, String> {
        match (&self.path, &self.paths) {
            (Some(p), None) => Ok(vec![("path".to_owned(), p.as_path())]),
            (None, Some(ps)) if ps.is_empty() => {
                Err("paths is empty: list at least one file or directory to read".into())
            }
            (None, Some(ps)) => Ok(ps
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("paths[{i}]"), p.as_path()))
                .collect()),
            (Some(_), Some(_)) => Err(
                "both path and paths are set: give one file or directory as path, or several \
                 as paths, not both"
                    .into(),
            ),
            (None, None) => {
                Err("missing path: set path = \"<file or directory>\" or paths = [...]".into())
            }
        }
    }

    pub(super) fn validate(&self, base_dir: &Path) -> Result<(), String> {
        if let Some(time) = &self.event_time {
            time.validate()?;
        }
        if self.split_size == 0 {
            return Err(format!(
                "split_size must be at least 1 byte (remove it for the default of \
                 {DEFAULT_SPLIT_SIZE} = 64 MiB)"
            ));
        }
        for (setting, path) in self.entries()? {
            let resolved = resolve(base_dir, path);
            let note = resolved_note(base_dir, path);
            match resolved.metadata() {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(format!(
                        "{setting}: file \"{}\" does not exist{note}",
                        path.display()
                    ));
                }
                Err(e) => {
                    return Err(format!(
                        "{setting}: cannot read \"{}\"{note}: {e}",
                        path.display()
                    ));
                }
                Ok(meta) if meta.is_dir() => {
                    if let Err(e) = std::fs::read_dir(&resolved) {
                        return Err(format!(
                            "{setting}: cannot list directory \"{}\"{note}: {e}",
                            path.display()
                        ));
                    }
                }
                Ok(meta) if !meta.is_file() => {
                    return Err(format!(
                        "{setting}: \"{}\" is neither a regular file nor a directory{note}",
                        path.display()
                    ));
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }

    /// The files to read, in order, with their sizes.
    fn list_files(&self, base_dir: &Path) -> Result<Vec<(PathBuf, u64)>, ConnectorError> {
        let mut files = Vec::new();
        for (_, path) in self.entries().map_err(ConnectorError::Invalid)? {
            let path = resolve(base_dir, path);
            let meta = path
                .metadata()
                .map_err(|e| ConnectorError::file("read", &path, e))?;
            if !meta.is_dir() {
                files.push((path, meta.len()));
                continue;
            }
            let mut in_dir = Vec::new();
            let entries =
                std::fs::read_dir(&path).map_err(|e| ConnectorError::file("list", &path, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| ConnectorError::file("list", &path, e))?;
                if entry.file_name().as_encoded_bytes().starts_with(b".") {
                    continue;
                }
                let file = entry.path();
                // Follows symbolic links, as opening the file will.
                let meta = file
                    .metadata()
                    .map_err(|e| ConnectorError::file("read", &file, e))?;
                if meta.is_file() {
                    in_dir.push((file, meta.len()));
                }
            }
            in_dir.sort();
            files.extend(in_dir);
        }
        Ok(files)
    }

    pub(super) fn build(
        &self,
        base_dir: &Path,
        subtask: usize,
        parallelism: usize,
    ) -> Result<Box<dyn Source>, ConnectorError> {
        self.validate(base_dir).map_err(ConnectorError::Invalid)?;
        let files = self.list_files(base_dir)?;
        let sizes: Vec<u64> = files.iter().map(|(_, len)| *len).collect();
        let splits = plan_splits(&sizes, self.split_size);
        tracing::debug!(
            files = files.len(),
            splits = splits.len(),
            "file source subtask {subtask}/{parallelism}"
        );
        let files = files.into_iter().map(|(path, _)| path).collect();
        if let Some(time) = &self.event_time {
            let mut source = TimedFileSource {
                files,
                splits,
                subtask,
                parallelism,
                time: time.clone(),
                cursors: Vec::new(),
                reader: None,
            };
            source.start_at(subtask, None);
            return Ok(Box::new(source));
        }
        let mut source = FileSource {
            files,
            splits,
            subtask,
            parallelism,
            current: 0,
            offset: 0,
            reader: None,
        };
        source.seek_split(subtask);
        Ok(Box::new(source))
    }
}

/// A byte range of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    file: usize,
    start: u64,
    end: u64,
}

/// Cuts files of the given sizes into splits of `split_size` bytes (the last split of a file
/// may be shorter; an empty file has none).
fn plan_splits(sizes: &[u64], split_size: u64) -> Vec<Split> {
    let mut splits = Vec::new();
    for (file, &len) in sizes.iter().enumerate() {
        let mut start = 0;
        while start < len {
            let end = start.saturating_add(split_size).min(len);
            splits.push(Split { file, start, end });
            start = end;
        }
    }
    splits
}

/// Reads the line at `open`'s reader into `out` as a record, without its line ending;
/// returns the bytes read, the line ending included.
fn read_line(open: &mut OpenFile, path: &Path, out: &mut Batch) -> Result<u64, ConnectorError> {
    let mut read = Ok(0);
    out.push_with(Kind::Insert, None, None, |buf| {
        let from = buf.len();
        read = read_until_newline(&mut open.reader, buf);
        if buf[from..].ends_with(b"\n") {
            buf.pop();
            if buf[from..].ends_with(b"\r") {
                buf.pop();
            }
        }
    });
    let n = read.map_err(|e| ConnectorError::file("read", path, e))? as u64;
    open.at += n;
    Ok(n)
}

/// `read_until(b'\n', buf)` of [`BufRead`], with `memchr`'s vectorized search for the line
/// end (a third of the file source's cost per line was std's search).
fn read_until_newline(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (used, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (i + 1, true),
            None => (available.len(), available.is_empty()),
        };
        buf.extend_from_slice(&available[..used]);
        reader.consume(used);
        read += used;
        if done {
            return Ok(read);
        }
    }
}

/// Whether `open`'s reader has nothing left of `split`.
fn split_done(open: &mut OpenFile, split: Split, path: &Path) -> Result<bool, ConnectorError> {
    Ok(open.at >= split.end
        || open
            .reader
            .fill_buf()
            .map_err(|e| ConnectorError::file("read", path, e))?
            .is_empty())
}

/// An open file and where its reader stands.
struct OpenFile {
    file: usize,
    reader: BufReader<File>,
    /// The offset of the reader's next byte.
    at: u64,
}

/// One subtask of the file source.
pub(super) struct FileSource {
    files: Vec<PathBuf>,
    /// All splits of all subtasks, in order.
    splits: Vec<Split>,
    subtask: usize,
    parallelism: usize,
    /// The global index of the split being read; `splits.len()` when done.
    current: usize,
    /// Where the next line of the current split starts; or, before the split was opened, the
    /// split's start, where a line may have begun in the previous split: [`open_at`] applies
    /// Hadoop's rule, which leaves an offset that does start a line unchanged.
    offset: u64,
    reader: Option<OpenFile>,
}

impl FileSource {
    /// Makes split `index` (`splits.len()` or more: none) the current split, not yet opened.
    fn seek_split(&mut self, index: usize) {
        self.current = index.min(self.splits.len());
        if let Some(split) = self.splits.get(self.current) {
            self.offset = split.start;
        } else {
            self.offset = 0;
            self.reader = None;
        }
    }

    /// Moves on to this subtask's next split. When that split is in the file already open
    /// and the reader is at or past its start, the reader stands at the split's first line
    /// (it only ever stops at line starts), so it is kept instead of seeking.
    fn next_split(&mut self) {
        loop {
            self.seek_split(self.current.saturating_add(self.parallelism));
            let (Some(split), Some(open)) = (self.splits.get(self.current), &self.reader) else {
                return;
            };
            if open.file != split.file || open.at < split.start {
                return;
            }
            self.offset = open.at;
            if open.at < split.end {
                return;
            }
        }
    }
}

/// The reader of `split`, positioned at the start of its next line: at `offset`, or, when
/// `offset > 0`, after the first `\n` at or after `offset - 1` (for an offset known to start
/// a line, that is the offset itself). Updates `offset` to where the reader stands.
fn open_at<'a>(
    slot: &'a mut Option<OpenFile>,
    files: &[PathBuf],
    split: Split,
    offset: &mut u64,
) -> Result<&'a mut OpenFile, ConnectorError> {
    if slot.as_ref().is_some_and(|r| r.file != split.file) {
        *slot = None;
    }
    let path = &files[split.file];
    let open = match slot {
        Some(open) => open,
        None => slot.insert(OpenFile {
            file: split.file,
            reader: BufReader::with_capacity(
                READ_BUFFER,
                File::open(path).map_err(|e| ConnectorError::file("open", path, e))?,
            ),
            at: 0,
        }),
    };
    if open.at == *offset {
        return Ok(open);
    }
    let read_error = |e| ConnectorError::file("read", path, e);
    if *offset == 0 {
        open.reader.rewind().map_err(read_error)?;
        open.at = 0;
    } else {
        open.reader
            .seek(SeekFrom::Start(*offset - 1))
            .map_err(read_error)?;
        let skipped = open.reader.skip_until(b'\n').map_err(read_error)?;
        // At the end of the file (one that shrank since the splits were planned) `skipped`
        // is 0; the caller then moves on.
        open.at = *offset - 1 + skipped as u64;
        *offset = open.at.max(*offset);
    }
    Ok(open)
}

impl Source for FileSource {
    fn poll(&mut self, out: &mut Batch, max_records: usize) -> Result<Poll, ConnectorError> {
        let mut emitted = 0;
        while emitted < max_records {
            let Some(&split) = self.splits.get(self.current) else {
                return Ok(if emitted == 0 {
                    Poll::Finished
                } else {
                    Poll::Ready
                });
            };
            let open = open_at(&mut self.reader, &self.files, split, &mut self.offset)?;
            let path = self.files[split.file].as_path();
            if split_done(open, split, path)? {
                self.next_split();
                continue;
            }
            read_line(open, path, out)?;
            self.offset = open.at;
            emitted += 1;
            if self.offset >= split.end {
                self.next_split();
            }
            if out.bytes() >= BATCH_BYTES {
                break;
            }
        }
        Ok(Poll::Ready)
    }

    fn position(&self) -> SourcePosition {
        serde_json::json!({ "split": self.current, "offset": self.offset })
    }

    fn restore(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        let fail = |why: String| cannot_restore(self.subtask, self.parallelism, position, &why);
        if position.get("splits").is_some() {
            return Err(fail(
                "it was taken with event_time set, which reads every split at once; set \
                 event_time as it was"
                    .into(),
            ));
        }
        let field = |name: &str| {
            position
                .get(name)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| fail("expected {\"split\": <index>, \"offset\": <bytes>}".into()))
        };
        let (index, offset) = (field("split")?, field("offset")?);
        let index = usize::try_from(index).unwrap_or(usize::MAX);
        if index == self.splits.len() {
            self.seek_split(index);
            return Ok(());
        }
        check_offset(
            &self.splits,
            &self.files,
            (self.subtask, self.parallelism),
            index,
            offset,
        )
        .map_err(fail)?;
        self.seek_split(index);
        self.offset = offset;
        self.reader = None;
        Ok(())
    }
}

/// A file source with `event_time`: reads a batch from each of the subtask's splits, then
/// from the one furthest behind in event time, and stamps each record with the time in its
/// line.
pub(super) struct TimedFileSource {
    files: Vec<PathBuf>,
    /// All splits of all subtasks, in order.
    splits: Vec<Split>,
    subtask: usize,
    parallelism: usize,
    time: LineTime,
    /// The subtask's splits not finished, in order.
    cursors: Vec<Cursor>,
    /// The file last read (one at a time, whichever split is read).
    reader: Option<OpenFile>,
}

/// Where a [`TimedFileSource`] stands in one of its splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    /// The split's global index.
    split: usize,
    /// As [`FileSource::offset`].
    offset: u64,
    /// The latest event time read from the split.
    max: Option<i64>,
}

impl TimedFileSource {
    /// Reads this subtask's splits from the one at global index `from` on; `at`: the
    /// offset in that split to start at (else its start).
    fn start_at(&mut self, from: usize, at: Option<u64>) {
        self.cursors = (from..self.splits.len())
            .step_by(self.parallelism)
            .map(|split| Cursor {
                split,
                offset: self.splits[split].start,
                max: None,
            })
            .collect();
        if let (Some(first), Some(at)) = (self.cursors.first_mut(), at) {
            first.offset = at;
        }
    }
}

impl Source for TimedFileSource {
    fn poll(&mut self, out: &mut Batch, max_records: usize) -> Result<Poll, ConnectorError> {
        // The first split that has not read a record yet, else the one furthest behind.
        while let Some(next) =
            (0..self.cursors.len()).min_by_key(|&i| self.cursors[i].max.unwrap_or(i64::MIN))
        {
            let cursor = &mut self.cursors[next];
            let split = self.splits[cursor.split];
            let open = open_at(&mut self.reader, &self.files, split, &mut cursor.offset)?;
            let path = self.files[split.file].as_path();
            let mut done = false;
            while out.len() < max_records && out.bytes() < BATCH_BYTES {
                if split_done(open, split, path)? {
                    done = true;
                    break;
                }
                let start = open.at;
                read_line(open, path, out)?;
                let line = out.last_value().expect("a line was read");
                let t = self.time.parse(line).map_err(|why| {
                    let line = String::from_utf8_lossy(&line[..line.len().min(200)]);
                    ConnectorError::Input(format!(
                        "{}: the line at byte {start}, {line:?}, has no event time: {why}; \
                         fix the line, or the source's event_time",
                        path.display()
                    ))
                })?;
                out.set_last_timestamp(t);
                cursor.max = Some(cursor.max.map_or(t, |m| m.max(t)));
                cursor.offset = open.at;
            }
            if done || split_done(open, split, path)? {
                self.cursors.remove(next);
            }
            if !out.is_empty() {
                return Ok(Poll::Ready);
            }
        }
        Ok(Poll::Finished)
    }

    fn split_time(&self) -> Option<SplitTime> {
        let mut least = None;
        for cursor in &self.cursors {
            let Some(max) = cursor.max else {
                return Some(SplitTime::Waiting);
            };
            least = Some(least.map_or(max, |l: i64| l.min(max)));
        }
        // With every split done the input has ended; the end sends the last watermark.
        least.map(SplitTime::Reached)
    }

    fn position(&self) -> SourcePosition {
        let splits: Vec<[u64; 2]> = (self.cursors.iter())
            .map(|c| [c.split as u64, c.offset])
            .collect();
        serde_json::json!({ "splits": splits })
    }

    fn restore(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        // A position of the source without event_time: its split, then the ones after it.
        if let (Some(index), Some(offset)) = (
            position.get("split").and_then(serde_json::Value::as_u64),
            position.get("offset").and_then(serde_json::Value::as_u64),
        ) {
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            if index != self.splits.len() {
                let at = (self.subtask, self.parallelism);
                check_offset(&self.splits, &self.files, at, index, offset)
                    .map_err(|why| self.cannot_restore(position, &why))?;
            }
            self.start_at(index, Some(offset));
            return Ok(());
        }
        let Some(listed) = position.get("splits").and_then(serde_json::Value::as_array) else {
            return Err(self.cannot_restore(
                position,
                "expected {\"splits\": [[<index>, <offset>], ...]}",
            ));
        };
        let mut cursors = Vec::with_capacity(listed.len());
        for entry in listed {
            let pair = entry.as_array().map(|p| {
                p.iter()
                    .filter_map(serde_json::Value::as_u64)
                    .collect::<Vec<_>>()
            });
            let Some([split, offset]) = pair.as_deref() else {
                return Err(self.cannot_restore(position, "expected [<index>, <offset>] pairs"));
            };
            cursors.push(Cursor {
                split: usize::try_from(*split).unwrap_or(usize::MAX),
                offset: *offset,
                max: None,
            });
        }
        self.cursors = cursors;
        self.check_cursors(position)
    }
}

impl TimedFileSource {
    /// After a restore: every cursor is a split of this subtask, at an offset within it.
    fn check_cursors(&self, position: &SourcePosition) -> Result<(), ConnectorError> {
        for c in &self.cursors {
            check_offset(
                &self.splits,
                &self.files,
                (self.subtask, self.parallelism),
                c.split,
                c.offset,
            )
            .map_err(|why| self.cannot_restore(position, &why))?;
        }
        Ok(())
    }

    /// Fails a restore from `position`, saying `why`.
    fn cannot_restore(&self, position: &SourcePosition, why: &str) -> ConnectorError {
        cannot_restore(self.subtask, self.parallelism, position, why)
    }
}

/// A restore of subtask `subtask` of `parallelism` from `position` failed: `why`.
fn cannot_restore(
    subtask: usize,
    parallelism: usize,
    position: &SourcePosition,
    why: &str,
) -> ConnectorError {
    ConnectorError::Invalid(format!(
        "file source subtask {subtask} of {parallelism}: cannot restore from position \
         {position}: {why}"
    ))
}

/// Why subtask `subtask` of `parallelism` cannot restore to `offset` in split `index` of
/// `splits`, if it cannot: the split is gone or another subtask's, or the offset outside it.
fn check_offset(
    splits: &[Split],
    files: &[PathBuf],
    (subtask, parallelism): (usize, usize),
    index: usize,
    offset: u64,
) -> Result<(), String> {
    let Some(split) = splits.get(index) else {
        return Err(format!(
            "the input has only {} splits now; did the input files change since the position \
             was taken?",
            splits.len()
        ));
    };
    if index % parallelism != subtask {
        return Err(format!(
            "split {index} belongs to subtask {}; the position was taken at another \
             parallelism, which the file source cannot rescale from yet",
            index % parallelism
        ));
    }
    if !(split.start..=split.end).contains(&offset) {
        return Err(format!(
            "offset {offset} lies outside split {index} (bytes {}..{} of {}); did the input \
             files change since the position was taken?",
            split.start,
            split.end,
            files[split.file].display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::connectors::SourceConfig;

    fn config(toml_text: &str) -> SourceConfig {
        toml::from_str(&format!("type = \"file\"\n{toml_text}")).unwrap()
    }

    #[test]
    fn lines_are_read_across_buffer_refills() {
        let text = b"first line\nsecond, longer line\r\n\nlast without newline";
        // A buffer smaller than most lines: every line end is found after a refill.
        let mut reader = BufReader::with_capacity(4, &text[..]);
        let mut lines = Vec::new();
        loop {
            let mut line = Vec::new();
            let n = read_until_newline(&mut reader, &mut line).unwrap();
            assert_eq!(n, line.len());
            if n == 0 {
                break;
            }
            lines.push(String::from_utf8(line).unwrap());
        }
        assert_eq!(
            lines,
            [
                "first line\n",
                "second, longer line\r\n",
                "\n",
                "last without newline"
            ]
        );
    }

    fn drain(source: &mut dyn Source, max: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut batch = Batch::default();
        loop {
            batch.clear();
            let poll = source.poll(&mut batch, max).unwrap();
            for r in batch.iter() {
                assert_eq!((r.key, r.timestamp, r.kind), (None, None, Kind::Insert));
                out.push(String::from_utf8(r.value.to_vec()).unwrap());
            }
            if poll == Poll::Finished {
                return out;
            }
        }
    }

    /// The lines of `text` as the source should emit them.
    fn lines_of(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    const FILES: &[(&str, &str)] = &[
        (
            "a.txt",
            "alpha\nbeta\r\n\ngamma delta\nlast without newline",
        ),
        ("b.txt", ""),
        ("c.txt", "\n\n\r\nx\n"),
        (
            "d.txt",
            "a fairly long line that spans many tiny splits, on purpose\nshort\n",
        ),
        (".hidden", "never read\n"),
    ];

    fn write_files(dir: &Path) {
        std::fs::create_dir(dir.join("in")).unwrap();
        for (name, text) in FILES {
            std::fs::write(dir.join("in").join(name), text).unwrap();
        }
        std::fs::create_dir(dir.join("in/subdir")).unwrap();
    }

    fn expected() -> Vec<String> {
        FILES
            .iter()
            .filter(|(name, _)| !name.starts_with('.'))
            .flat_map(|(_, text)| lines_of(text))
            .collect()
    }

    #[test]
    fn every_line_exactly_once_at_any_parallelism_and_split_size() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path());
        let want = expected();
        for split_size in [1, 2, 3, 5, 7, 11, 64, 1 << 20] {
            let cfg = config(&format!("path = \"in\"\nsplit_size = {split_size}"));
            cfg.validate(dir.path()).unwrap();
            let mut sequential = cfg.build(dir.path(), 0, 1, &Clock::system()).unwrap();
            assert_eq!(
                drain(sequential.as_mut(), 3),
                want,
                "split_size {split_size}"
            );
            for p in 2..=4 {
                let mut got = Vec::new();
                for s in 0..p {
                    let mut src = cfg.build(dir.path(), s, p, &Clock::system()).unwrap();
                    got.extend(drain(src.as_mut(), 2));
                }
                let (mut got, mut want) = (got, want.clone());
                got.sort();
                want.sort();
                assert_eq!(got, want, "split_size {split_size}, parallelism {p}");
            }
        }
    }

    #[test]
    fn paths_lists_files_in_the_given_order() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path());
        let cfg = config("paths = [\"in/c.txt\", \"in/a.txt\"]\nsplit_size = 4");
        let mut src = cfg.build(dir.path(), 0, 1, &Clock::system()).unwrap();
        let want: Vec<String> = lines_of(FILES[2].1)
            .into_iter()
            .chain(lines_of(FILES[0].1))
            .collect();
        assert_eq!(drain(src.as_mut(), 100), want);
    }

    #[test]
    fn restore_yields_exactly_the_remaining_lines() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path());
        for split_size in [1, 4, 9, 1 << 20] {
            let cfg = config(&format!("path = \"in\"\nsplit_size = {split_size}"));
            for p in 1..=3 {
                for s in 0..p {
                    let mut full = cfg.build(dir.path(), s, p, &Clock::system()).unwrap();
                    let all = drain(full.as_mut(), 1000);
                    // A position before the first poll, after each record, and at the end.
                    let mut src = cfg.build(dir.path(), s, p, &Clock::system()).unwrap();
                    let mut done = 0;
                    loop {
                        let pos = src.position();
                        let mut resumed = cfg.build(dir.path(), s, p, &Clock::system()).unwrap();
                        resumed.restore(&pos).unwrap();
                        assert_eq!(
                            drain(resumed.as_mut(), 2),
                            all[done..],
                            "split_size {split_size}, subtask {s}/{p}, position {pos}"
                        );
                        let mut batch = Batch::default();
                        if src.poll(&mut batch, 1).unwrap() == Poll::Finished {
                            break;
                        }
                        done += batch.len();
                    }
                    assert_eq!(done, all.len());
                }
            }
        }
    }

    #[test]
    fn restore_rejects_positions_of_other_subtasks() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path());
        let cfg = config("path = \"in\"\nsplit_size = 4");
        let mut src = cfg.build(dir.path(), 1, 2, &Clock::system()).unwrap();
        let err = src
            .restore(&serde_json::json!({ "split": 0, "offset": 0 }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to subtask 0"), "{err}");
        let err = src
            .restore(&serde_json::json!({ "split": 1, "offset": 40 }))
            .unwrap_err()
            .to_string();
        assert!(err.contains("outside split 1"), "{err}");
        assert!(
            src.restore(&serde_json::json!({ "split": 10_000, "offset": 0 }))
                .is_err()
        );
        assert!(src.restore(&serde_json::json!({ "next": 1 })).is_err());
        // The same for the source with event_time, from its positions and the sequential one's.
        let timed =
            config("path = \"in\"\nsplit_size = 4\nevent_time = { field = 0, delimiter = \" \" }");
        let mut src = timed.build(dir.path(), 1, 2, &Clock::system()).unwrap();
        for (position, want) in [
            (
                serde_json::json!({ "split": 0, "offset": 0 }),
                "belongs to subtask 0",
            ),
            (
                serde_json::json!({ "split": 10_000, "offset": 0 }),
                "splits now",
            ),
            (
                serde_json::json!({ "splits": [[1, 4], [2, 8]] }),
                "belongs to subtask 0",
            ),
            (
                serde_json::json!({ "splits": [[1, 40]] }),
                "outside split 1",
            ),
            (serde_json::json!({ "splits": [[10_001, 0]] }), "splits now"),
            (serde_json::json!({ "next": 1 }), "expected"),
        ] {
            let err = src.restore(&position).unwrap_err().to_string();
            assert!(err.contains(want), "{position}: {err}");
        }
    }

    #[test]
    fn splits_cover_files_in_order() {
        let splits = plan_splits(&[5, 0, 2], 2);
        let ranges: Vec<_> = splits.iter().map(|s| (s.file, s.start, s.end)).collect();
        assert_eq!(ranges, [(0, 0, 2), (0, 2, 4), (0, 4, 5), (2, 0, 2)]);
        assert_eq!(plan_splits(&[3], u64::MAX).len(), 1);
    }

    #[test]
    fn validation_names_the_setting_and_the_base_directory() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path());
        let base = dir.path().display().to_string();

        let err = config("path = \"data/in.txt\"")
            .validate(dir.path())
            .unwrap_err();
        assert_eq!(
            err,
            format!(
                "path: file \"data/in.txt\" does not exist (relative paths are resolved \
                 against the job spec's directory {base})"
            )
        );
        let err = config("paths = [\"in/a.txt\", \"/no/such/file\"]")
            .validate(dir.path())
            .unwrap_err();
        assert_eq!(err, "paths[1]: file \"/no/such/file\" does not exist");

        let cases = [
            ("paths = []", "paths is empty"),
            ("path = \"in\"\npaths = [\"in\"]", "both path and paths"),
            ("split_size = 10", "missing path"),
            ("path = \"in\"\nsplit_size = 0", "split_size"),
        ];
        for (toml_text, want) in cases {
            let cfg = config(toml_text);
            let err = cfg.validate(dir.path()).unwrap_err();
            assert!(err.contains(want), "{toml_text}: {err}");
            assert!(cfg.build(dir.path(), 0, 1, &Clock::system()).is_err());
        }
    }

    #[test]
    fn an_empty_directory_finishes_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("path = \".\"");
        let mut src = cfg.build(dir.path(), 0, 1, &Clock::system()).unwrap();
        assert_eq!(src.poll(&mut Batch::default(), 10).unwrap(), Poll::Finished);
        assert_eq!(
            src.position(),
            serde_json::json!({ "split": 0, "offset": 0 })
        );
    }

    /// Lines `k<i> <time>` of two files, the second (by name) earlier in event time than the
    /// first, each in time order; returns every line with its time.
    fn write_timed(dir: &Path) -> Vec<(String, i64)> {
        std::fs::create_dir(dir.join("timed")).unwrap();
        let mut all = Vec::new();
        for (name, start) in [("a.txt", 10_000), ("b.txt", 0)] {
            let mut text = String::new();
            for i in 0..40_i64 {
                let line = format!("k{} {}", i % 7, start + i * 10);
                text.push_str(&line);
                text.push('\n');
                all.push((line, start + i * 10));
            }
            std::fs::write(dir.join("timed").join(name), text).unwrap();
        }
        all
    }

    fn timed_config(split_size: u64) -> SourceConfig {
        config(&format!(
            "path = \"timed\"\nsplit_size = {split_size}\n\
             event_time = {{ field = 1, delimiter = \" \" }}"
        ))
    }

    /// Each line read with its time.
    type Stamped = Vec<(String, i64)>;

    /// Polls `source` `max` records at a time to its end: each record with its time, and
    /// the split time after each poll with the number of records emitted before it.
    fn drain_timed(
        source: &mut dyn Source,
        max: usize,
    ) -> (Stamped, Vec<(usize, Option<SplitTime>)>) {
        let (mut out, mut times) = (Vec::new(), Vec::new());
        let mut batch = Batch::default();
        loop {
            batch.clear();
            let poll = source.poll(&mut batch, max).unwrap();
            for r in batch.iter() {
                let line = String::from_utf8(r.value.to_vec()).unwrap();
                out.push((line, r.timestamp.expect("a time")));
            }
            times.push((out.len(), source.split_time()));
            if poll == Poll::Finished {
                return (out, times);
            }
        }
    }

    fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
        v.sort();
        v
    }

    #[test]
    fn with_event_time_every_line_comes_once_with_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let all = write_timed(dir.path());
        for split_size in [1, 7, 64, 1 << 20] {
            let cfg = timed_config(split_size);
            for p in 1..=3 {
                let mut got = Vec::new();
                for s in 0..p {
                    let mut src = cfg.build(dir.path(), s, p, &Clock::system()).unwrap();
                    got.extend(drain_timed(src.as_mut(), 3).0);
                }
                assert_eq!(sorted(got), sorted(all.clone()), "{split_size} {p}");
            }
        }
    }

    #[test]
    fn with_event_time_the_split_furthest_behind_is_read_and_time_follows_it() {
        // Each file's lines are in time order, so once the source says its splits have
        // reached `t`, nothing it emits after is earlier than `t`, however its splits start.
        let dir = tempfile::tempdir().unwrap();
        write_timed(dir.path());
        for split_size in [50, 128, 1 << 20] {
            let splits = if split_size == 1 << 20 { 2 } else { 0 };
            let mut src = timed_config(split_size)
                .build(dir.path(), 0, 1, &Clock::system())
                .unwrap();
            let (out, times) = drain_timed(src.as_mut(), 2);
            for &(emitted, time) in &times {
                if let Some(SplitTime::Reached(t)) = time {
                    let early = out[emitted..].iter().find(|(_, ts)| *ts < t);
                    assert_eq!(early, None, "split size {split_size}: after {t}");
                }
            }
            // Every split is read before a time is given: with one split per file, the
            // first batch (of a.txt) cannot say anything, the second (of b.txt) can; then
            // b.txt, behind, is read to its end before a.txt goes on.
            if splits == 2 {
                assert_eq!(times[0], (2, Some(SplitTime::Waiting)));
                assert_eq!(times[1], (4, Some(SplitTime::Reached(10))));
                let order: Vec<i64> = out.iter().map(|(_, t)| *t).collect();
                let b: Vec<i64> = (0..40).map(|i| i * 10).collect();
                let a: Vec<i64> = (0..40).map(|i| 10_000 + i * 10).collect();
                assert_eq!(order, [&a[..2], &b, &a[2..]].concat());
            }
            // Byte ranges of one file in time order: once each has read its first batch,
            // they are read one after the other, so what is emitted is in time order.
            let first_round = times
                .iter()
                .position(|(_, t)| t != &Some(SplitTime::Waiting));
            let rest: Vec<i64> = out[times[first_round.unwrap()].0..]
                .iter()
                .map(|(_, t)| *t)
                .collect();
            let mut ordered = rest.clone();
            ordered.sort();
            assert_eq!(rest, ordered, "split size {split_size}");
            assert!(
                (times.iter()).any(|(_, t)| matches!(t, Some(SplitTime::Reached(_)))),
                "{times:?}"
            );
        }
    }

    #[test]
    fn with_event_time_restore_yields_exactly_the_remaining_lines() {
        let dir = tempfile::tempdir().unwrap();
        write_timed(dir.path());
        for split_size in [7, 100, 1 << 20] {
            let timed = timed_config(split_size);
            let plain = config(&format!("path = \"timed\"\nsplit_size = {split_size}"));
            for p in 1..=2 {
                for s in 0..p {
                    let build = |cfg: &SourceConfig| cfg.build(dir.path(), s, p, &Clock::system());
                    let all = drain_timed(build(&timed).unwrap().as_mut(), 1000).0;
                    // From its own positions: what it had not emitted yet, each once.
                    let mut src = build(&timed).unwrap();
                    let mut emitted = Vec::new();
                    loop {
                        let pos = src.position();
                        let mut resumed = build(&timed).unwrap();
                        resumed.restore(&pos).unwrap();
                        let mut rest = emitted.clone();
                        rest.extend(drain_timed(resumed.as_mut(), 3).0);
                        assert_eq!(sorted(rest), sorted(all.clone()), "position {pos}");
                        let mut batch = Batch::default();
                        let poll = src.poll(&mut batch, 2).unwrap();
                        emitted.extend(batch.iter().map(|r| {
                            (
                                String::from_utf8(r.value.to_vec()).unwrap(),
                                r.timestamp.unwrap(),
                            )
                        }));
                        if poll == Poll::Finished {
                            break;
                        }
                    }
                    // From the positions of the source without event_time (a job that
                    // turned it on): what that source had left.
                    let mut src = build(&plain).unwrap();
                    let mut done = Vec::new();
                    loop {
                        let mut resumed = build(&timed).unwrap();
                        resumed.restore(&src.position()).unwrap();
                        let rest: Vec<String> = (drain_timed(resumed.as_mut(), 3).0)
                            .into_iter()
                            .map(|(line, _)| line)
                            .collect();
                        let all_lines: Vec<String> = all.iter().map(|(l, _)| l.clone()).collect();
                        let mut both = done.clone();
                        both.extend(rest);
                        assert_eq!(sorted(both), sorted(all_lines));
                        let mut batch = Batch::default();
                        let poll = src.poll(&mut batch, 3).unwrap();
                        done.extend(
                            batch
                                .iter()
                                .map(|r| String::from_utf8(r.value.to_vec()).unwrap()),
                        );
                        if poll == Poll::Finished {
                            break;
                        }
                    }
                    // A timed position cannot go back to reading one split after another.
                    let err = build(&plain)
                        .unwrap()
                        .restore(&build(&timed).unwrap().position())
                        .unwrap_err()
                        .to_string();
                    assert!(err.contains("set event_time as it was"), "{err}");
                }
            }
        }
    }

    #[test]
    fn a_line_without_its_time_fails_naming_the_file_the_line_and_the_field() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("in.txt"), "a,1\nb,x\n").unwrap();
        std::fs::write(dir.path().join("short.txt"), "a,1\nb\n").unwrap();
        for (file, want) in [
            (
                "in.txt",
                r#"the line at byte 4, "b,x", has no event time: field 1 ("x") is not milliseconds"#,
            ),
            (
                "short.txt",
                r#"the line at byte 4, "b", has no event time: it has 1 field(s) separated by ",""#,
            ),
        ] {
            let cfg = config(&format!("path = \"{file}\"\nevent_time = {{ field = 1 }}"));
            let mut src = cfg.build(dir.path(), 0, 1, &Clock::system()).unwrap();
            let mut batch = Batch::default();
            let err = loop {
                match src.poll(&mut batch, 10) {
                    Ok(Poll::Finished) => panic!("{file} was read without an error"),
                    Ok(_) => {}
                    Err(e) => break e,
                }
            };
            let err = err.to_string();
            assert!(err.contains(file) && err.contains(want), "{err}");
            assert!(ConnectorError::Input(err).is_permanent());
        }
        let bad = config("path = \"in.txt\"\nevent_time = { field = 1, delimiter = \"::\" }");
        let err = bad.validate(dir.path()).unwrap_err();
        assert!(
            err.contains("event_time.delimiter must be one ASCII character"),
            "{err}"
        );
    }

    #[test]
    fn times_are_read_in_each_format() {
        let time = |format: TimeFormat| LineTime {
            field: 0,
            delimiter: ",".into(),
            format,
        };
        let ms = time(TimeFormat::EpochMs);
        assert_eq!(ms.parse(b" 1700000000123 ,x"), Ok(1_700_000_000_123));
        assert_eq!(ms.parse(b"-5"), Ok(-5));
        assert!(ms.parse(b"1.5").is_err());
        let s = time(TimeFormat::EpochS);
        assert_eq!(s.parse(b"1700000000"), Ok(1_700_000_000_000));
        assert_eq!(s.parse(b"1700000000.5"), Ok(1_700_000_000_500));
        assert_eq!(s.parse(b"1700000000.123"), Ok(1_700_000_000_123));
        assert_eq!(s.parse(b"-1.5"), Ok(-1_500));
        assert!(s.parse(b"1.1234").is_err() && s.parse(b"1.x").is_err());
        let rfc = time(TimeFormat::Rfc3339);
        assert_eq!(
            rfc.parse(b"2023-11-14T22:13:20.123Z"),
            Ok(1_700_000_000_123)
        );
        assert_eq!(rfc.parse(b"1970-01-01T00:00:00Z"), Ok(0));
        let err = rfc.parse(b"yesterday").unwrap_err();
        assert!(err.contains("RFC 3339"), "{err}");
    }
}
