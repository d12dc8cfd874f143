//! The service's files: JSON records written atomically, and the ids that name directories
//! (checked before they touch a path, so no request reaches outside the data directory).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{ErrorCode, ServiceError};

/// Reads the JSON record at `path`.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ServiceError> {
    let bytes = std::fs::read(path).map_err(|e| ServiceError::io("read", path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ServiceError::new(
            ErrorCode::Internal,
            format!("{} is damaged: {e}", path.display()),
        )
    })
}

/// Writes `value` as JSON to `path` through a synced temporary file and a rename: a crash
/// leaves the old record or the new one.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ServiceError> {
    let json = serde_json::to_vec_pretty(value).expect("records serialize");
    let tmp = path.with_extension("tmp");
    File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(&json)?;
            f.sync_all()
        })
        .map_err(|e| ServiceError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ServiceError::io("rename into place", path, e))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| ServiceError::io("sync", dir, e))?;
    }
    Ok(())
}

/// A new random id of 32 hex digits.
pub(crate) fn new_id() -> String {
    format!("{:032x}", fastrand::u128(..))
}

/// Whether `id` is one [`new_id`] could have made.
pub(crate) fn is_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Checks a name a caller gives (a request id, a component name or version): 1 to 64 of
/// `A-Z a-z 0-9 . _ -`, not starting with a dot, since some name directories.
pub(crate) fn check_name(what: &str, value: &str) -> Result<(), ServiceError> {
    let ok = (1..=64).contains(&value.len())
        && !value.starts_with('.')
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ServiceError::invalid(format!(
            "{what} {value:?} is not valid: use 1 to 64 letters, digits, '.', '_' or '-', not \
             starting with '.'"
        )))
    }
}

/// Unix time in milliseconds.
pub(crate) fn now_ms() -> u64 {
    crate::checkpoint::storage::unix_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_reach_outside_a_directory_are_refused() {
        assert!(is_id(&new_id()));
        for bad in [
            "",
            "..",
            "../etc",
            "ABCDEF0123456789abcdef0123456789",
            "0/1",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
        for bad in ["", ".hidden", "..", "a/b", "a\\b", &"x".repeat(65), "é"] {
            assert!(check_name("request_id", bad).is_err(), "{bad}");
        }
        assert!(check_name("request_id", "retry-1_2.3").is_ok());
    }
}
