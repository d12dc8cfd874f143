//! How typed state values become bytes: `postcard`, appended to the batch's buffers.

use postcard::ser_flavors::Flavor;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A byte range inside one of a state's buffers (the load answer or the arena).
///
/// `u32` rather than `usize`: the buffers live in a 32-bit guest, and the per-slot tables
/// stay half the size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The span of `part`, a sub-slice of `buf`.
    pub(crate) fn of(buf: &[u8], part: &[u8]) -> Span {
        let start = part.as_ptr() as usize - buf.as_ptr() as usize;
        debug_assert!(start + part.len() <= buf.len());
        Span {
            start: start as u32,
            len: part.len() as u32,
        }
    }

    pub(crate) fn start(self) -> usize {
        self.start as usize
    }

    pub(crate) fn get(self, buf: &[u8]) -> &[u8] {
        &buf[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Appends to a `Vec` without taking it over (postcard's own `ExtendFlavor` consumes it).
struct Append<'a>(&'a mut Vec<u8>);

impl Flavor for Append<'_> {
    type Output = ();

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Encodes `value` at the end of `buf`; on error `buf` is left as it was.
pub(crate) fn encode<T: Serialize + ?Sized>(
    value: &T,
    buf: &mut Vec<u8>,
) -> postcard::Result<Span> {
    let start = buf.len();
    match postcard::serialize_with_flavor(value, Append(buf)) {
        Ok(()) => Ok(Span {
            start: start as u32,
            len: (buf.len() - start) as u32,
        }),
        Err(e) => {
            buf.truncate(start);
            Err(e)
        }
    }
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> postcard::Result<T> {
    postcard::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_appends_and_spans_point_at_the_value() {
        let mut buf = b"xyz".to_vec();
        let span = encode("hello", &mut buf).unwrap();
        assert_eq!(&buf[..3], b"xyz");
        assert_eq!(decode::<String>(span.get(&buf)).unwrap(), "hello");
        let tail = &buf[3..];
        assert_eq!(Span::of(&buf, tail), span);
    }
}
