//! The file sink: one line per record into `part-<subtask>` files of a directory.

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ConnectorError, LineFormat, Sink, resolve, resolved_note};
use crate::batch::Batch;

/// Bytes buffered before a write reaches the file.
const WRITE_BUFFER: usize = 1 << 20;

/// `type = "file"`: subtask `s` writes `part-<s>` (0-based) in the directory `path`, one line
/// per record. The directory is created if missing; each subtask truncates its file when it
/// starts, and subtask 0 removes the `part-<n>` files with `n >= parallelism` that an earlier
/// run with a higher parallelism left behind, so the directory holds exactly this run's output.
///
/// On a checkpoint barrier the file is synced and its length recorded; a job restored from
/// that checkpoint cuts the file back to that length and appends from there, so the file
/// holds every record exactly once after a crash. (Lines written after the last checkpoint
/// are visible until the cut: readers that must never see them want a transactional sink.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkConfig {
    /// The output directory; a relative path is resolved against the job spec's directory.
    pub path: PathBuf,
    /// What each line holds: `"value"` (the default) or `"key_value"` (key, tab, value).
    #[serde(default)]
    pub format: LineFormat,
}

impl FileSinkConfig {
    pub(super) fn validate(&self, base_dir: &Path) -> Result<(), String> {
        if self.path.as_os_str().is_empty() {
            return Err("path is empty: set it to the directory the part files go into".into());
        }
        let dir = resolve(base_dir, &self.path);
        // The nearest existing ancestor must be a directory for `create_dir_all` to succeed.
        let mut at = Some(dir.as_path());
        while let Some(p) = at {
            if let Ok(meta) = p.metadata() {
                if meta.is_dir() {
                    return Ok(());
                }
                let what = if p == dir {
                    format!("path \"{}\"", self.path.display())
                } else {
                    format!("path \"{}\": \"{}\"", self.path.display(), p.display())
                };
                return Err(format!(
                    "{what} exists and is not a directory{}; the file sink writes one file per \
                     subtask (part-0, part-1, ...) into a directory, so point path at a directory \
                     or at a path that does not exist yet",
                    resolved_note(base_dir, &self.path)
                ));
            }
            at = p.parent();
        }
        Ok(())
    }

    pub(super) fn build(
        &self,
        base_dir: &Path,
        subtask: usize,
        parallelism: usize,
        restore: Option<&serde_json::Value>,
    ) -> Result<FileSink, ConnectorError> {
        let dir = resolve(base_dir, &self.path);
        std::fs::create_dir_all(&dir)
            .map_err(|e| ConnectorError::file("create the output directory", &dir, e))?;
        if subtask == 0 {
            remove_stale_parts(&dir, parallelism)?;
        }
        let path = dir.join(format!("part-{subtask}"));
        let file = match restore {
            None => File::create(&path)
                .map_err(|e| ConnectorError::file("create the output file", &path, e))?,
            Some(state) => reopen(&path, state)?,
        };
        tracing::debug!(path = %path.display(), "file sink subtask {subtask}/{parallelism} writing");
        Ok(FileSink {
            out: BufWriter::with_capacity(WRITE_BUFFER, file),
            path,
            format: self.format,
            line: Vec::new(),
        })
    }
}

/// What the file sink records in a checkpoint.
#[derive(Debug, Serialize, Deserialize)]
struct Committed {
    /// Bytes of the part file that belong to the checkpoint.
    len: u64,
}

/// Opens the part file of a restored sink and cuts it back to its checkpointed length.
fn reopen(path: &Path, state: &serde_json::Value) -> Result<File, ConnectorError> {
    let committed = Committed::deserialize(state).map_err(|e| {
        ConnectorError::Invalid(format!(
            "the checkpointed state of the file sink for {} is not valid: {e}",
            path.display()
        ))
    })?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| ConnectorError::file("reopen the checkpointed output file", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| ConnectorError::file("read", path, e))?
        .len();
    if len < committed.len {
        return Err(ConnectorError::Invalid(format!(
            "output file {} has {len} bytes but the checkpoint recorded {}: it was truncated or \
             replaced outside weir; restore its content or run the job with --fresh",
            path.display(),
            committed.len
        )));
    }
    file.set_len(committed.len)
        .and_then(|()| file.seek(std::io::SeekFrom::End(0)).map(|_| ()))
        .map_err(|e| ConnectorError::file("cut back", path, e))?;
    Ok(file)
}

/// Removes `part-<n>` with `n >= parallelism` from `dir`.
fn remove_stale_parts(dir: &Path, parallelism: usize) -> Result<(), ConnectorError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| ConnectorError::file("list the output directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ConnectorError::file("list the output directory", dir, e))?;
        let name = entry.file_name();
        let stale = name
            .to_str()
            .and_then(|n| n.strip_prefix("part-"))
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n >= parallelism);
        if stale && entry.file_type().is_ok_and(|t| t.is_file()) {
            let path = entry.path();
            std::fs::remove_file(&path)
                .map_err(|e| ConnectorError::file("remove the stale output file", &path, e))?;
        }
    }
    Ok(())
}

/// One subtask of the file sink.
pub(super) struct FileSink {
    out: BufWriter<File>,
    path: PathBuf,
    format: LineFormat,
    /// Reused for each line.
    line: Vec<u8>,
}

impl Sink for FileSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        for rec in batch.iter() {
            self.line.clear();
            self.format.write(&mut self.line, &rec);
            self.out
                .write_all(&self.line)
                .map_err(|e| ConnectorError::file("write to", &self.path, e))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.out
            .flush()
            .map_err(|e| ConnectorError::file("write to", &self.path, e))?;
        self.out
            .get_ref()
            .sync_all()
            .map_err(|e| ConnectorError::file("sync", &self.path, e))
    }

    fn snapshot(&mut self, _checkpoint: u64) -> Result<serde_json::Value, ConnectorError> {
        self.flush()?;
        let len = self
            .out
            .get_mut()
            .stream_position()
            .map_err(|e| ConnectorError::file("read the position in", &self.path, e))?;
        Ok(serde_json::to_value(Committed { len }).expect("serializes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::SinkConfig;
    use weir_wire::Kind;

    fn batch(values: &[&str]) -> Batch {
        let mut b = Batch::default();
        for v in values {
            b.push_with(Kind::Insert, Some(b"k"), None, |buf| {
                buf.extend_from_slice(v.as_bytes())
            });
        }
        b
    }

    fn config(path: &str, format: &str) -> SinkConfig {
        toml::from_str(&format!(
            "type = \"file\"\npath = \"{path}\"\nformat = \"{format}\""
        ))
        .unwrap()
    }

    #[test]
    fn each_subtask_writes_its_part_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out/nested", "key_value");
        cfg.validate(dir.path()).unwrap();
        let mut sinks: Vec<_> = (0..2)
            .map(|s| cfg.build(dir.path(), s, 2).unwrap())
            .collect();
        sinks[0].write(&batch(&["a", "b"])).unwrap();
        sinks[1].write(&batch(&["c"])).unwrap();
        for s in &mut sinks {
            s.flush().unwrap();
        }
        let out = dir.path().join("out/nested");
        assert_eq!(
            std::fs::read_to_string(out.join("part-0")).unwrap(),
            "k\ta\nk\tb\n"
        );
        assert_eq!(
            std::fs::read_to_string(out.join("part-1")).unwrap(),
            "k\tc\n"
        );
    }

    #[test]
    fn a_new_run_truncates_and_removes_stale_parts() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out", "value");
        for s in 0..3 {
            let mut sink = cfg.build(dir.path(), s, 3).unwrap();
            sink.write(&batch(&["old", "older"])).unwrap();
            sink.flush().unwrap();
        }
        std::fs::write(dir.path().join("out/part-x"), "not ours").unwrap();
        let mut sink = cfg.build(dir.path(), 0, 1).unwrap();
        sink.write(&batch(&["new"])).unwrap();
        sink.flush().unwrap();
        let mut names: Vec<_> = std::fs::read_dir(dir.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["part-0", "part-x"]);
        let part = std::fs::read_to_string(dir.path().join("out/part-0")).unwrap();
        assert_eq!(part, "new\n");
    }

    #[test]
    fn a_restored_sink_cuts_back_to_the_checkpoint_and_appends() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config("out", "value");
        let mut sink = cfg.build(dir.path(), 0, 1).unwrap();
        sink.write(&batch(&["a", "b"])).unwrap();
        let state = sink.snapshot(1).unwrap();
        sink.write(&batch(&["after the checkpoint"])).unwrap();
        sink.flush().unwrap();
        drop(sink);
        let mut sink = cfg.restore(dir.path(), 0, 1, Some(&state)).unwrap();
        sink.write(&batch(&["c"])).unwrap();
        sink.flush().unwrap();
        let part = std::fs::read_to_string(dir.path().join("out/part-0")).unwrap();
        assert_eq!(part, "a\nb\nc\n");

        std::fs::write(dir.path().join("out/part-0"), "a").unwrap();
        let err = cfg
            .restore(dir.path(), 0, 1, Some(&state))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("truncated or replaced outside weir"), "{err}");
    }

    #[test]
    fn a_file_in_the_way_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("taken"), "").unwrap();

        let err = config("taken", "value").validate(dir.path()).unwrap_err();
        assert!(
            err.contains("path \"taken\" exists and is not a directory"),
            "{err}"
        );
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        let err = config("taken/sub", "value")
            .validate(dir.path())
            .unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");

        let err = config("taken/sub", "value")
            .build(dir.path(), 0, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("cannot create the output directory"), "{err}");
        assert!(err.contains("taken/sub"), "{err}");
    }
}
