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

/// Encodes `value` with `codec` at the end of `buf`; on error `buf` is left as it was. An
/// integer or a string is written inline (see [`Direct`]), the rest in a call.
#[inline(always)]
pub(crate) fn encode<T: Serialize + ?Sized>(
    codec: Codec,
    value: &T,
    buf: &mut Vec<u8>,
) -> Result<Span, CodecError> {
    let start = buf.len();
    if codec == Codec::Cbor && value.serialize(Direct(buf)).is_ok() {
        return Ok(Span {
            start: start as u32,
            len: (buf.len() - start) as u32,
        });
    }
    encode_any(codec, value, buf)
}

#[inline(never)]
fn encode_any<T: Serialize + ?Sized>(
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

/// Decodes a `T` that `codec` encoded into `bytes`: an integer inline (see [`Int`]), the rest
/// in a call.
#[inline(always)]
pub(crate) fn decode<T: DeserializeOwned>(codec: Codec, bytes: &[u8]) -> Result<T, CodecError> {
    if codec == Codec::Cbor
        && let Some(int) = cbor_int(bytes)
        && let Ok(value) = T::deserialize(CborInt(int))
    {
        return Ok(value);
    }
    decode_any(codec, bytes)
}

/// Decodes a `T` from a CBOR integer, as [`decode`] decodes it from the integer's bytes.
#[inline(always)]
pub(crate) fn decode_int<T: DeserializeOwned>(int: Int) -> Result<T, CodecError> {
    T::deserialize(CborInt(int)).or_else(|_| decode_int_any(int))
}

#[inline(never)]
fn decode_int_any<T: DeserializeOwned>(int: Int) -> Result<T, CodecError> {
    let (bytes, len) = int_bytes(int);
    decode_any(Codec::Cbor, &bytes[..len])
}

/// The integer `value` is in CBOR, if it is one of at most 64 bits (through options and
/// newtypes, as [`encode`] writes them): [`put_int`] writes the bytes `encode` would.
#[inline(always)]
pub(crate) fn int_of<T: Serialize + ?Sized>(value: &T) -> Option<Int> {
    let mut int = None;
    value.serialize(Direct(&mut int)).ok()?;
    int
}

/// Appends the CBOR encoding of `int`.
#[inline(always)]
pub(crate) fn put_int(buf: &mut Vec<u8>, int: Int) {
    put_array(buf, int_bytes(int));
}

/// Appends the first `len` bytes of `bytes` with one growth of `buf` and a fixed-size move.
#[inline(always)]
fn put_array(buf: &mut Vec<u8>, (bytes, len): ([u8; 9], usize)) {
    let at = buf.len();
    buf.extend_from_slice(&bytes);
    buf.truncate(at + len);
}

/// The CBOR encoding of `int`: its first `len` bytes, in a fixed-size array so that callers
/// copy it with fixed-size moves.
#[inline(always)]
pub(crate) fn int_bytes(int: Int) -> ([u8; 9], usize) {
    match int {
        Int::Unsigned(n) => cbor_head(0, n),
        // CBOR's negative integers are -1 - n.
        Int::Negative(v) => cbor_head(0x20, (-1 - v) as u64),
    }
}

#[inline(never)]
fn decode_any<T: DeserializeOwned>(codec: Codec, bytes: &[u8]) -> Result<T, CodecError> {
    match codec {
        Codec::Cbor => cbor4ii::serde::from_slice(bytes).map_err(|e| error(codec, e)),
        Codec::Postcard => postcard::from_bytes(bytes).map_err(|e| error(codec, e)),
    }
}

/// An integer, the commonest state value (counts, sums, timestamps), decoded without
/// cbor4ii: its reader copies an integer's bytes with a copy of variable length, which in a
/// guest is a `memory.copy` (a call out of the guest, see [`extend_bytes`]) for every count
/// of 24 or more. (Integers are encoded without it too, by [`Direct`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Int {
    Unsigned(u64),
    Negative(i64),
}

/// The integer `bytes` encode when they are exactly one CBOR integer (major type 0 or 1) that
/// fits in 64 bits.
#[inline(always)]
pub(crate) fn cbor_int(bytes: &[u8]) -> Option<Int> {
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

/// The CBOR head of major type `major` (in its top three bits) and argument `n` as cbor4ii
/// writes it, the shortest form: its first `len` bytes.
#[inline(always)]
fn cbor_head(major: u8, n: u64) -> ([u8; 9], usize) {
    let mut head = [0; 9];
    let len = match n {
        0..=23 => {
            head[0] = major | n as u8;
            1
        }
        24..=0xff => {
            head[..2].copy_from_slice(&[major | 24, n as u8]);
            2
        }
        0x100..=0xffff => {
            head[0] = major | 25;
            head[1..3].copy_from_slice(&(n as u16).to_be_bytes());
            3
        }
        0x1_0000..=0xffff_ffff => {
            head[0] = major | 26;
            head[1..5].copy_from_slice(&(n as u32).to_be_bytes());
            5
        }
        _ => {
            head[0] = major | 27;
            head[1..9].copy_from_slice(&n.to_be_bytes());
            9
        }
    };
    (head, len)
}

/// Writes the value being encoded when it is an integer of at most 64 bits or a string
/// (through options and newtypes, which CBOR writes as their content: the commonest state
/// values and map keys), else fails having written nothing and [`encode`] falls back to
/// cbor4ii, whose writer is a call per piece, with the piece on the stack.
struct Direct<'b, O>(&'b mut O);

/// Where [`Direct`] puts an integer or a string.
trait DirectOut {
    fn int(&mut self, int: Int) -> Result<(), NotDirect>;
    fn str(&mut self, s: &str) -> Result<(), NotDirect>;
}

/// Encoding: the value's CBOR bytes.
impl DirectOut for Vec<u8> {
    #[inline(always)]
    fn int(&mut self, int: Int) -> Result<(), NotDirect> {
        put_int(self, int);
        Ok(())
    }

    #[inline(always)]
    fn str(&mut self, s: &str) -> Result<(), NotDirect> {
        put_array(self, cbor_head(0x60, s.len() as u64));
        extend_bytes(self, s.as_bytes());
        Ok(())
    }
}

/// [`int_of`]: the integer, and nothing else.
impl DirectOut for Option<Int> {
    #[inline(always)]
    fn int(&mut self, int: Int) -> Result<(), NotDirect> {
        *self = Some(int);
        Ok(())
    }

    fn str(&mut self, _: &str) -> Result<(), NotDirect> {
        Err(NotDirect)
    }
}

/// What [`Direct`] fails with.
#[derive(Debug)]
struct NotDirect;

impl std::fmt::Display for NotDirect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not an integer or a string")
    }
}

impl std::error::Error for NotDirect {}

impl serde::ser::Error for NotDirect {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        NotDirect
    }
}

macro_rules! not_direct {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {
        $(
            fn $method(self $(, _: $arg)*) -> Result<(), NotDirect> {
                Err(NotDirect)
            }
        )*
    };
}

/// Serializer methods of narrower integers that hand the value on widened.
macro_rules! widen {
    ($($method:ident($t:ty) => $wide:ident),* $(,)?) => {
        $(
            #[inline(always)]
            fn $method(self, v: $t) -> Result<(), NotDirect> {
                self.$wide(v.into())
            }
        )*
    };
}

impl<O: DirectOut> serde::Serializer for Direct<'_, O> {
    type Ok = ();
    type Error = NotDirect;
    type SerializeSeq = serde::ser::Impossible<(), NotDirect>;
    type SerializeTuple = serde::ser::Impossible<(), NotDirect>;
    type SerializeTupleStruct = serde::ser::Impossible<(), NotDirect>;
    type SerializeTupleVariant = serde::ser::Impossible<(), NotDirect>;
    type SerializeMap = serde::ser::Impossible<(), NotDirect>;
    type SerializeStruct = serde::ser::Impossible<(), NotDirect>;
    type SerializeStructVariant = serde::ser::Impossible<(), NotDirect>;

    #[inline(always)]
    fn serialize_u64(self, v: u64) -> Result<(), NotDirect> {
        self.0.int(Int::Unsigned(v))
    }

    #[inline(always)]
    fn serialize_i64(self, v: i64) -> Result<(), NotDirect> {
        self.0.int(match u64::try_from(v) {
            Ok(n) => Int::Unsigned(n),
            Err(_) => Int::Negative(v),
        })
    }

    #[inline(always)]
    fn serialize_str(self, v: &str) -> Result<(), NotDirect> {
        self.0.str(v)
    }

    widen! {
        serialize_u8(u8) => serialize_u64, serialize_u16(u16) => serialize_u64,
        serialize_u32(u32) => serialize_u64, serialize_i8(i8) => serialize_i64,
        serialize_i16(i16) => serialize_i64, serialize_i32(i32) => serialize_i64,
    }

    #[inline(always)]
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), NotDirect> {
        value.serialize(self)
    }

    #[inline(always)]
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), NotDirect> {
        value.serialize(self)
    }

    not_direct! {
        serialize_bool(bool), serialize_i128(i128), serialize_u128(u128), serialize_f32(f32),
        serialize_f64(f64), serialize_char(char), serialize_bytes(&[u8]),
        serialize_none(), serialize_unit(), serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), NotDirect> {
        Err(NotDirect)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotDirect> {
        Err(NotDirect)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotDirect> {
        Err(NotDirect)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, NotDirect> {
        Err(NotDirect)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, NotDirect> {
        Err(NotDirect)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotDirect> {
        Err(NotDirect)
    }

    fn serialize_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStruct, NotDirect> {
        Err(NotDirect)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, NotDirect> {
        Err(NotDirect)
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
        // An integer a value state holds decoded reads as its bytes do (errors compared for
        // the shortest form only: for a longer one they name the bytes that are not there).
        if let Some(int) = cbor_int(bytes) {
            let held = decode_int::<T>(int).map_err(|e| e.to_string());
            let mut shortest = Vec::new();
            put_int(&mut shortest, int);
            if shortest == bytes {
                assert_eq!(held, theirs, "{int:?} as {}", std::any::type_name::<T>());
            } else {
                assert_eq!(held.ok(), theirs.ok(), "{bytes:02x?} held as {int:?}");
            }
        }
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Count(u64);

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(untagged)]
    enum Loose {
        Number(i64),
        Text(String),
    }

    /// Integers at the edges of CBOR's head lengths, of both signs, and beyond 64 bits.
    const INTS: &[i128] = &[
        0,
        1,
        23,
        24,
        255,
        256,
        65_535,
        65_536,
        u32::MAX as i128,
        1 << 32,
        i64::MAX as i128,
        u64::MAX as i128,
        -1,
        -24,
        -25,
        -256,
        -257,
        -65_537,
        -(1 << 32) - 1,
        i64::MIN as i128,
        -(1 << 64),
    ];

    /// Encodes `value` after three bytes already in the buffer and checks that the span holds
    /// exactly the bytes cbor4ii writes for it.
    fn encodes_as_cbor4ii<T: Serialize + std::fmt::Debug>(value: &T) {
        let mut buf = b"xyz".to_vec();
        let span = encode(Codec::Cbor, value, &mut buf).unwrap();
        let theirs = cbor4ii::serde::to_vec(Vec::new(), value).unwrap();
        assert_eq!(span.get(&buf), theirs, "{value:?}");
        assert_eq!(buf.len(), 3 + theirs.len(), "{value:?}");
        // A value state holds an integer decoded and writes it back as these bytes.
        if let Some(int) = int_of(value) {
            let mut held = Vec::new();
            put_int(&mut held, int);
            assert_eq!(held, theirs, "{value:?} held as {int:?}");
        }
    }

    #[derive(serde::Serialize, Debug)]
    struct Total(i64);

    #[derive(serde::Serialize, Debug)]
    struct Pair {
        a: u64,
    }

    #[test]
    fn integers_encode_as_cbor4ii_encodes_them() {
        for &i in INTS {
            macro_rules! each_type {
                ($($t:ty),*) => {$(
                    if let Ok(v) = <$t>::try_from(i) {
                        encodes_as_cbor4ii(&v);
                        encodes_as_cbor4ii(&Some(v));
                    }
                )*};
            }
            each_type!(u8, u16, u32, u64, i8, i16, i32, i64);
            if let Ok(v) = i64::try_from(i) {
                encodes_as_cbor4ii(&Total(v));
                encodes_as_cbor4ii(&Some(Some(v)));
                encodes_as_cbor4ii(&Pair { a: v as u64 });
            }
            encodes_as_cbor4ii(&i);
        }
        assert_eq!(int_of(&Some(Total(-3))), Some(Int::Negative(-3)));
        assert_eq!(int_of(&u64::MAX), Some(Int::Unsigned(u64::MAX)));
        for not_int in [
            int_of("5"),
            int_of(&1.5f64),
            int_of(&None::<u64>),
            int_of(&5u128),
        ] {
            assert_eq!(not_int, None);
        }
        // What is not an integer or a string goes to cbor4ii.
        encodes_as_cbor4ii(&None::<u64>);
        encodes_as_cbor4ii(&Some(None::<u64>));
        encodes_as_cbor4ii(&true);
        encodes_as_cbor4ii(&1.5f64);
        encodes_as_cbor4ii(&'x');
        encodes_as_cbor4ii(&());
        encodes_as_cbor4ii(&vec![1u64, 300]);
        encodes_as_cbor4ii(&(7u64, -7i64));
    }

    #[derive(serde::Serialize, Debug)]
    struct Name(String);

    #[test]
    fn strings_encode_as_cbor4ii_encodes_them() {
        // Lengths at each width of the CBOR head: in the byte, then 1, 2 and 4 more bytes.
        for len in [0, 1, 16, 17, 23, 24, 255, 256, 65_535, 65_536] {
            let text: String = "é".repeat(len / 2) + &"x".repeat(len % 2);
            encodes_as_cbor4ii(&text);
            encodes_as_cbor4ii(&text.as_str());
            encodes_as_cbor4ii(&Some(text.as_str()));
            encodes_as_cbor4ii(&Name(text.clone()));
            let mut buf = Vec::new();
            let span = encode(Codec::Cbor, &text, &mut buf).unwrap();
            assert_eq!(decode::<String>(Codec::Cbor, span.get(&buf)).unwrap(), text);
        }
    }

    #[test]
    fn integers_decode_as_cbor4ii_decodes_them() {
        for &i in INTS {
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
