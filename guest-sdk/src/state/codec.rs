//! How typed state values become bytes, appended to the batch's buffers: CBOR (the encoding
//! every weir SDK shares), or `postcard` for state written by earlier versions of this SDK.

use serde::Serialize;
use serde::de::DeserializeOwned;
use weir_wire::extend_bytes;

/// How an operator's state values (and map keys) are encoded.
///
/// [`Cbor`](Codec::Cbor), the default, is the encoding the Python and JavaScript SDKs use
/// too, so a savepoint of an operator restores into its rewrite in another language: a
/// struct is a map of its fields by name, an `Option` null or the value, integers take the
/// shortest form, and floats are 64 bits (use `f64` in state another language reads; for
/// bytes, `serde_bytes`, else a `Vec<u8>` is an array of numbers). [`Postcard`](Codec::Postcard)
/// is what versions of this SDK before 0.2 wrote: an operator with such state sets
/// [`Operator::STATE_CODEC`](crate::Operator::STATE_CODEC) to it, or moves its states to
/// CBOR with [`Context::with_codec`](crate::Context::with_codec).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Codec {
    /// CBOR (RFC 8949), shared with the other SDKs.
    #[default]
    Cbor,
    /// `postcard`, compact and Rust-only: the codec of weir-sdk before 0.2.
    Postcard,
}

/// A value that could not be encoded, or bytes that are not a value of the type.
#[derive(Debug)]
pub struct CodecError {
    codec: Codec,
    message: String,
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let codec = match self.codec {
            Codec::Cbor => "CBOR",
            Codec::Postcard => "postcard",
        };
        write!(f, "{codec}: {}", self.message)
    }
}

impl std::error::Error for CodecError {}

fn error(codec: Codec, e: impl std::fmt::Display) -> CodecError {
    CodecError {
        codec,
        message: e.to_string(),
    }
}

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

    #[inline(always)]
    pub(crate) fn get(self, buf: &[u8]) -> &[u8] {
        &buf[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Appends to a `Vec` without taking it over (postcard's own `ExtendFlavor` consumes it),
/// short pieces without a `memory.copy` ([`extend_bytes`]).
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        extend_bytes(self.0, data);
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

impl cbor4ii::core::enc::Write for Append<'_> {
    type Error = std::convert::Infallible;

    #[inline(always)]
    fn push(&mut self, input: &[u8]) -> Result<(), Self::Error> {
        extend_bytes(self.0, input);
        Ok(())
    }
}

/// Encodes `value` with `codec` at the end of `buf`; on error `buf` is left as it was.
#[inline]
pub(crate) fn encode<T: Serialize + ?Sized>(
    codec: Codec,
    value: &T,
    buf: &mut Vec<u8>,
) -> Result<Span, CodecError> {
    let start = buf.len();
    let result = match codec {
        Codec::Cbor => value
            .serialize(&mut cbor4ii::serde::Serializer::new(Append(buf)))
            .map_err(|e| error(codec, e)),
        Codec::Postcard => {
            postcard::serialize_with_flavor(value, Append(buf)).map_err(|e| error(codec, e))
        }
    };
    match result {
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

/// Decodes a `T` that `codec` encoded into `bytes`.
#[inline]
pub(crate) fn decode<T: DeserializeOwned>(codec: Codec, bytes: &[u8]) -> Result<T, CodecError> {
    match codec {
        Codec::Cbor => cbor4ii::serde::from_slice(bytes).map_err(|e| error(codec, e)),
        Codec::Postcard => postcard::from_bytes(bytes).map_err(|e| error(codec, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_appends_and_spans_point_at_the_value() {
        for codec in [Codec::Cbor, Codec::Postcard] {
            let mut buf = b"xyz".to_vec();
            let span = encode(codec, "hello", &mut buf).unwrap();
            assert_eq!(&buf[..3], b"xyz");
            assert_eq!(decode::<String>(codec, span.get(&buf)).unwrap(), "hello");
            let tail = &buf[3..];
            assert_eq!(Span::of(&buf, tail), span);
        }
    }

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Profile {
        count: u64,
        name: String,
        score: f64,
        tags: Vec<String>,
        parent: Option<i32>,
    }

    #[test]
    fn cbor_is_what_the_python_sdk_writes() {
        // Bytes of `weir.cbor.encode` (guest-sdk/python) for the same values.
        let mut buf = Vec::new();
        encode(Codec::Cbor, &7u64, &mut buf).unwrap();
        assert_eq!(buf, [0x07]);
        buf.clear();
        encode(Codec::Cbor, &-300i64, &mut buf).unwrap();
        assert_eq!(buf, [0x39, 0x01, 0x2b]);
        buf.clear();
        let p = Profile {
            count: 3,
            name: "ann".into(),
            score: 1.5,
            tags: vec!["a".into()],
            parent: None,
        };
        encode(Codec::Cbor, &p, &mut buf).unwrap();
        // {"count": 3, "name": "ann", "score": 1.5, "tags": ["a"], "parent": None}
        let python = b"\xa5ecount\x03dnamecannescore\xfb\x3f\xf8\x00\x00\x00\x00\x00\x00dtags\x81aafparent\xf6";
        assert_eq!(buf, python);
        assert_eq!(decode::<Profile>(Codec::Cbor, python).unwrap(), p);
    }

    #[test]
    fn a_type_mismatch_names_the_codec() {
        let mut buf = Vec::new();
        encode(Codec::Cbor, "text", &mut buf).unwrap();
        let e = decode::<u64>(Codec::Cbor, &buf).unwrap_err();
        assert!(e.to_string().starts_with("CBOR: "), "{e}");
    }
}
