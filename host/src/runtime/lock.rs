//! One run of a job at a time: an exclusive lock on a file in the job's checkpoint directory
//! and one next to its RocksDB directory, held for as long as the job runs.
//!
//! Two runs of one job would delete each other's checkpoints and state directories. The lock
//! is an advisory `flock`, which the kernel releases when its process ends however it ends, so
//! a lock left by a killed run is taken over by the next one without anybody cleaning up. The
//! file holds the holder's process id, for the message that refuses a second run.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::JobError;

/// The lock of one job, released when dropped.
#[derive(Debug)]
pub(crate) struct JobLock {
    _file: File,
}

impl JobLock {
    /// Takes the lock file `path` (creating it) for job `job`, or names the process that
    /// holds it.
    pub(crate) fn acquire(path: &Path, job: &str) -> Result<JobLock, JobError> {
        let io = |cause| JobError::Lock {
            path: path.to_path_buf(),
            cause,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(JobError::AlreadyRunning {
                    job: job.to_string(),
                    pid: text.trim().parse().ok(),
                    path: path.to_path_buf(),
                });
            }
            Err(TryLockError::Error(cause)) => return Err(io(cause)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .and_then(|()| file.flush())
            .map_err(io)?;
        Ok(JobLock { _file: file })
    }
}

/// Where the locks of a job live: in its checkpoint directory, and next to its RocksDB
/// working directory (which a start clears: two jobs of one name with different checkpoint
/// directories must not share it); none when the job keeps nothing on disk that two runs
/// could share.
pub(crate) fn lock_paths(
    checkpoint_root: Option<&Path>,
    state_root: Option<&Path>,
) -> Vec<PathBuf> {
    let state = state_root.map(|dir| {
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        dir.with_file_name(format!("{name}.lock"))
    });
    (checkpoint_root.map(|dir| dir.join(".lock")).into_iter())
        .chain(state)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job").join(".lock");
        let first = JobLock::acquire(&path, "j").unwrap();
        match JobLock::acquire(&path, "j") {
            Err(JobError::AlreadyRunning { job, pid, .. }) => {
                assert_eq!(job, "j");
                assert_eq!(pid, Some(std::process::id()));
            }
            other => panic!("{other:?}"),
        }
        drop(first);
        let _again = JobLock::acquire(&path, "j").expect("released on drop");
    }

    #[test]
    fn where_the_lock_lives() {
        let (chk, state) = (Path::new("/c/job"), Path::new("/s/job.v2"));
        let (chk_lock, state_lock) = (
            PathBuf::from("/c/job/.lock"),
            PathBuf::from("/s/job.v2.lock"),
        );
        assert_eq!(
            lock_paths(Some(chk), Some(state)),
            [chk_lock.clone(), state_lock.clone()]
        );
        assert_eq!(lock_paths(Some(chk), None), [chk_lock]);
        assert_eq!(lock_paths(None, Some(state)), [state_lock]);
        assert_eq!(lock_paths(None, None), Vec::<PathBuf>::new());
    }
}
