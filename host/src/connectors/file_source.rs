//! The file source: one record per line of text files, read in parallel by byte ranges.
//!
//! Every file is cut into *splits* of `split_size` bytes. As in Hadoop's `LineRecordReader`,
//! a line belongs to the split in which its first byte lies: a split that starts at offset
//! `start > 0` skips everything up to and including the first `\n` at or after `start - 1`,
//! and reads lines while they start before its end, finishing the last one past the end if
//! needed. Splits are numbered in file order, then by offset; split `k` goes to subtask
//! `k % parallelism`.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use weir_wire::Kind;

use super::{ConnectorError, Poll, Source, SourcePosition, resolve, resolved_note};
use crate::batch::{BATCH_BYTES, Batch};

const DEFAULT_SPLIT_SIZE: u64 = 64 << 20;
const READ_BUFFER: usize = 1 << 20;

/// `type = "file"`: one record per line of one or more text files.
///
/// A record's value is the line without its `\n` or `\r\n`; records have no key and no
/// timestamp. Exactly one of `path` and `paths` must be given; a directory stands for all
/// regular files in it whose names do not start with `.`, sorted by name.
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
}

fn default_split_size() -> u64 {
    DEFAULT_SPLIT_SIZE
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
    ) -> Result<FileSource, ConnectorError> {
        self.validate(base_dir).map_err(ConnectorError::Invalid)?;
        let files = self.list_files(base_dir)?;
        let sizes: Vec<u64> = files.iter().map(|(_, len)| *len).collect();
        let splits = plan_splits(&sizes, self.split_size);
        tracing::debug!(
            files = files.len(),
            splits = splits.len(),
            "file source subtask {subtask}/{parallelism}"
        );
        let mut source = FileSource {
            files: files.into_iter().map(|(path, _)| path).collect(),
            splits,
            subtask,
            parallelism,
            current: 0,
            offset: 0,
            reader: None,
        };
        source.seek_split(subtask);
        Ok(source)
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
            let at_eof = open.at >= split.end
                || open
                    .reader
                    .fill_buf()
                    .map_err(|e| ConnectorError::file("read", path, e))?
                    .is_empty();
            if at_eof {
                self.next_split();
                continue;
            }
            // Read the line straight into the batch, then drop its line ending.
            let mut read = Ok(0);
            out.push_with(Kind::Insert, None, None, |buf| {
                let from = buf.len();
                read = open.reader.read_until(b'\n', buf);
                if buf[from..].ends_with(b"\n") {
                    buf.pop();
                    if buf[from..].ends_with(b"\r") {
                        buf.pop();
                    }
                }
            });
            let n = read.map_err(|e| ConnectorError::file("read", path, e))?;
            open.at += n as u64;
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
        let fail = |why: String| {
            ConnectorError::Invalid(format!(
                "file source subtask {} of {}: cannot restore from position {position}: {why}",
                self.subtask, self.parallelism
            ))
        };
        let field = |name: &str| {
            position
                .get(name)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| fail("expected {\"split\": <index>, \"offset\": <bytes>}".into()))
        };
        let (index, offset) = (field("split")?, field("offset")?);
        let total = self.splits.len();
        let index = usize::try_from(index).unwrap_or(usize::MAX);
        if index >= total {
            if index == total {
                self.seek_split(total);
                return Ok(());
            }
            return Err(fail(format!(
                "the input has only {total} splits now; did the input files change since the \
                 position was taken?"
            )));
        }
        if index % self.parallelism != self.subtask {
            return Err(fail(format!(
                "split {index} belongs to subtask {}; the position was taken at another \
                 parallelism, which the file source cannot rescale from yet",
                index % self.parallelism
            )));
        }
        let split = self.splits[index];
        if !(split.start..=split.end).contains(&offset) {
            return Err(fail(format!(
                "offset {offset} lies outside split {index} (bytes {}..{} of {}); did the input \
                 files change since the position was taken?",
                split.start,
                split.end,
                self.files[split.file].display()
            )));
        }
        self.seek_split(index);
        self.offset = offset;
        self.reader = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::connectors::SourceConfig;

    fn config(toml_text: &str) -> SourceConfig {
        toml::from_str(&format!("type = \"file\"\n{toml_text}")).unwrap()
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
}
