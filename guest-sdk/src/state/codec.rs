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
        Codec::Cbor => {
            if let Some(int) = cbor_int(bytes)
                && let Ok(value) = T::deserialize(CborInt(int))
            {
                return Ok(value);
            }
            cbor4ii::serde::from_slice(bytes).map_err(|e| error(codec, e))
        }
        Codec::Postcard => postcard::from_bytes(bytes).map_err(|e| error(codec, e)),
    }
}

/// An integer, the commonest state value (counts, sums, timestamps), decoded without cbor4ii:
/// its reader copies an integer's bytes with a copy of variable length, which in a guest is a
/// `memory.copy` (a call out of the guest, see [`extend_bytes`]) for every count of 24 or more.
#[derive(Clone, Copy)]
enum Int {
    Unsigned(u64),
    Negative(i64),
}

/// The integer `bytes` encode when they are exactly one CBOR integer (major type 0 or 1) that
/// fits in 64 bits.
#[inline(always)]
fn cbor_int(bytes: &[u8]) -> Option<Int> {
    let (&first, rest) = bytes.split_first()?;
    let n = match (first & 0x1f, rest.len()) {
        (n @ 0..=23, 0) => u64::from(n),
        (24, 1) => u64::from(rest[0]),
        (25, 2) => u64::from(u16::from_be_bytes([rest[0], rest[1]])),
        (26, 4) => u64::from(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]])),
        (27, 8) => u64::from_be_bytes([
            rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6], rest[7],
        ]),
        _ => return None,
    };
    match first >> 5 {
        0 => Some(Int::Unsigned(n)),
        // CBOR's negative integers are -1 - n.
        1 => i64::try_from(n).ok().map(|n| Int::Negative(-1 - n)),
        _ => None,
    }
}

/// Hands an integer to the type being decoded; when the type does not take one, [`decode`]
/// falls back to cbor4ii, which decides as before (the tests check that both agree).
struct CborInt(Int);

impl<'de> serde::Deserializer<'de> for CborInt {
    type Error = serde::de::value::Error;

    #[inline(always)]
    fn deserialize_any<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Int::Unsigned(n) => v.visit_u64(n),
            Int::Negative(n) => v.visit_i64(n),
        }
    }

    fn deserialize_option<V: serde::de::Visitor<'de>>(self, v: V) -> Result<V::Value, Self::Error> {
        v.visit_some(self)
    }

    fn deserialize_newtype_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, Self::Error> {
        v.visit_newtype_struct(self)
    }

    // cbor4ii decodes floats from CBOR floats only; so does this.
    fn deserialize_f32<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a float"))
    }

    fn deserialize_f64<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a float"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct enum identifier ignored_any
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

    /// What `decode` answers for `bytes` as cbor4ii alone does, with its error if any.
    fn same_as_cbor4ii<T>(bytes: &[u8])
    where
        T: DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let ours = decode::<T>(Codec::Cbor, bytes).map_err(|e| e.to_string());
        let theirs =
            cbor4ii::serde::from_slice::<T>(bytes).map_err(|e| error(Codec::Cbor, e).to_string());
        assert_eq!(
            ours,
            theirs,
            "{bytes:02x?} as {}",
            std::any::type_name::<T>()
        );
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Count(u64);

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(untagged)]
    enum Loose {
        Number(i64),
        Text(String),
    }

    #[test]
    fn integers_decode_as_cbor4ii_decodes_them() {
        let ints: &[i128] = &[
            0,
            1,
            23,
            24,
            255,
            256,
            65_535,
            65_536,
            1 << 32,
            i64::MAX as i128,
            u64::MAX as i128,
            -1,
            -24,
            -25,
            -256,
            -257,
            -65_537,
            i64::MIN as i128,
            -(1 << 64),
        ];
        for &i in ints {
            let mut buf = Vec::new();
            encode(Codec::Cbor, &i, &mut buf).unwrap();
            same_as_cbor4ii::<u64>(&buf);
            same_as_cbor4ii::<i64>(&buf);
            same_as_cbor4ii::<u8>(&buf);
            same_as_cbor4ii::<i32>(&buf);
            same_as_cbor4ii::<i128>(&buf);
            same_as_cbor4ii::<Option<u64>>(&buf);
            same_as_cbor4ii::<Count>(&buf);
            same_as_cbor4ii::<Loose>(&buf);
            same_as_cbor4ii::<bool>(&buf);
            same_as_cbor4ii::<f64>(&buf);
            same_as_cbor4ii::<char>(&buf);
            same_as_cbor4ii::<String>(&buf);
            same_as_cbor4ii::<()>(&buf);
            same_as_cbor4ii::<Vec<u64>>(&buf);
        }
        // Longer forms than needed (another encoder may write them): 5, 5 and -1.
        same_as_cbor4ii::<u64>(&[0x18, 0x05]);
        same_as_cbor4ii::<u64>(&[0x1b, 0, 0, 0, 0, 0, 0, 0, 0x05]);
        same_as_cbor4ii::<i64>(&[0x38, 0x00]);
        // Not one integer: a longer form with bytes after it, and a truncated one.
        same_as_cbor4ii::<u64>(&[0x18, 0x20, 0x00]);
        same_as_cbor4ii::<u64>(&[0x19, 0x01]);
    }

    #[test]
    fn a_type_mismatch_names_the_codec() {
        let mut buf = Vec::new();
        encode(Codec::Cbor, "text", &mut buf).unwrap();
        let e = decode::<u64>(Codec::Cbor, &buf).unwrap_err();
        assert!(e.to_string().starts_with("CBOR: "), "{e}");
    }
}
