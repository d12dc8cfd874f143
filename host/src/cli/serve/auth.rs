//! Bearer tokens of `weir serve`: read from a file at start, compared in constant time.
//!
//! The file has one token per line; a line `TOKEN read-only` gives a token that may look but
//! not change anything. Blank lines and lines starting with `#` are skipped.

use std::path::Path;

use anyhow::{Context, bail};
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Everything.
    Full,
    /// GET only.
    ReadOnly,
}

/// The tokens a server accepts.
#[derive(Debug, Default)]
pub struct Tokens {
    tokens: Vec<(Vec<u8>, Access)>,
}

/// Tokens shorter than this are refused: they can be guessed.
const MIN_LEN: usize = 16;

impl Tokens {
    /// Reads the token file at `path`.
    pub fn load(path: &Path) -> anyhow::Result<Tokens> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?;
        Tokens::parse(&text).with_context(|| format!("token file {}", path.display()))
    }

    fn parse(text: &str) -> anyhow::Result<Tokens> {
        let mut tokens = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let token = words.next().expect("a non-empty line has a word");
            let access = match words.next() {
                None => Access::Full,
                Some("read-only") => Access::ReadOnly,
                Some(other) => bail!(
                    "line {}: unknown access {other:?}; write `TOKEN` or `TOKEN read-only`",
                    n + 1
                ),
            };
            if token.len() < MIN_LEN {
                bail!(
                    "line {}: a token must have at least {MIN_LEN} characters (e.g. `openssl \
                     rand -hex 24`)",
                    n + 1
                );
            }
            tokens.push((token.as_bytes().to_vec(), access));
        }
        if tokens.is_empty() {
            bail!("it holds no token");
        }
        Ok(Tokens { tokens })
    }

    /// Whether any token is configured (else the server takes every request).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// What `presented` may do, if it is a token: every token is compared, in constant time.
    pub fn check(&self, presented: &[u8]) -> Option<Access> {
        let mut found = None;
        for (token, access) in &self.tokens {
            if bool::from(token.as_slice().ct_eq(presented)) {
                found = Some(*access);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_their_access() {
        let t = Tokens::parse("# ops\nfull-access-token-0001\n\nread-token-0000001 read-only\n")
            .unwrap();
        assert_eq!(t.check(b"full-access-token-0001"), Some(Access::Full));
        assert_eq!(t.check(b"read-token-0000001"), Some(Access::ReadOnly));
        assert_eq!(t.check(b"full-access-token-000"), None);
        assert_eq!(t.check(b""), None);
        let err = Tokens::parse("short\n").unwrap_err().to_string();
        assert!(err.contains("at least 16"), "{err}");
        let err = Tokens::parse("long-enough-token-1 admin\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown access"), "{err}");
        assert!(Tokens::parse("# nothing\n").is_err());
    }
}
