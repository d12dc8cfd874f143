//! How the text sinks turn a record into one line.

use serde::{Deserialize, Serialize};
use weir_wire::RecordRef;

/// What a text sink writes for each record, followed by `\n`.
///
/// Bytes that are not valid UTF-8 are written as U+FFFD. Keys and values are written as they
/// are otherwise: a value that contains a newline spans several lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineFormat {
    /// The value only (`format = "value"`, the default).
    #[default]
    Value,
    /// The key, a tab, then the value (`format = "key_value"`); a record without a key has an
    /// empty key.
    KeyValue,
}

impl LineFormat {
    /// Appends the line for `rec` (with its `\n`) to `buf`.
    pub(crate) fn write(self, buf: &mut Vec<u8>, rec: &RecordRef<'_>) {
        if self == LineFormat::KeyValue {
            push_lossy(buf, rec.key.unwrap_or_default());
            buf.push(b'\t');
        }
        push_lossy(buf, rec.value);
        buf.push(b'\n');
    }
}

/// Appends `bytes` as UTF-8, replacing invalid sequences as `String::from_utf8_lossy` does,
/// without allocating.
fn push_lossy(buf: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        buf.extend_from_slice(chunk.valid().as_bytes());
        if !chunk.invalid().is_empty() {
            buf.extend_from_slice(
                char::REPLACEMENT_CHARACTER
                    .encode_utf8(&mut [0; 4])
                    .as_bytes(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_wire::Kind;

    fn line(format: LineFormat, key: Option<&[u8]>, value: &[u8]) -> String {
        let mut buf = Vec::new();
        let rec = RecordRef {
            kind: Kind::Insert,
            key,
            timestamp: None,
            value,
        };
        format.write(&mut buf, &rec);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn formats() {
        assert_eq!(line(LineFormat::Value, Some(b"k"), b"v"), "v\n");
        assert_eq!(line(LineFormat::KeyValue, Some(b"k"), b"v"), "k\tv\n");
        assert_eq!(line(LineFormat::KeyValue, None, b"v"), "\tv\n");
        assert_eq!(line(LineFormat::Value, None, b""), "\n");
    }

    #[test]
    fn invalid_utf8_is_replaced_like_from_utf8_lossy() {
        let bytes = b"a\xffb\xe2\x82c\xe2\x82\xac";
        let want = format!("{}\n", String::from_utf8_lossy(bytes));
        assert_eq!(line(LineFormat::Value, None, bytes), want);
    }
}
