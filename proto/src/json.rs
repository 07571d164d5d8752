//! JSON request bodies, read strictly: an object wherever a struct is expected, nothing
//! after the value, and a bound on nesting that can be checked before parsing.

use serde::de::{DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer};

/// Deserializes `T`, requiring a JSON object wherever `T` itself is a struct. serde's
/// derive also accepts an array of the fields' values in declaration order (`["c", "h"]`
/// for `{challenge, hash}`): a shape no client means, which would slip a body past the
/// field names it is checked by. Use it as `#[serde(deserialize_with = "...")]` on fields
/// that hold a struct; [`from_slice`] and `error::decode_json` apply it to the body.
pub fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(ObjectOnly(deserializer))
}

/// An optional integer as the reference's models read one: a JSON integer, or a number
/// with no fractional part (`3.0`, which JSON Schema's `integer` includes and pydantic
/// takes as 3). Use it as `#[serde(default, deserialize_with = "...")]` on an `Option<i64>`.
pub fn optional_integer<'de, D>(deserializer: D) -> Result<Option<i64>, D::Error>
where
    D: Deserializer<'de>,
{
    /// Says `i64` in its errors, as serde's own integers do (the validation error's type
    /// is read from it).
    struct Integer;

    impl<'de> Visitor<'de> for Integer {
        type Value = Option<i64>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("i64")
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, inner: D2) -> Result<Self::Value, D2::Error> {
            inner.deserialize_any(self)
        }

        fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
            Ok(Some(value))
        }

        fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Self::Value, E> {
            i64::try_from(value)
                .map(Some)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(value), &self))
        }

        fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Self::Value, E> {
            // Within i64's range, so that the cast is exact.
            if value.fract() == 0.0 && (-9.2e18..=9.2e18).contains(&value) {
                Ok(Some(value as i64))
            } else {
                Err(E::invalid_type(serde::de::Unexpected::Float(value), &self))
            }
        }
    }

    deserializer.deserialize_option(Integer)
}

/// `T` from a whole body: an object at the top, nothing but whitespace after it.
pub fn from_slice<T: DeserializeOwned>(body: &[u8]) -> serde_json::Result<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let value = object(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A document Sandgate stored, read back without serde_json's 128-level limit. What it
/// stores was held to a bound of its own on the way in (the webhook's 512 levels), so
/// every record it accepted is read back whole, however deep.
pub fn from_stored<T: DeserializeOwned>(text: &[u8]) -> serde_json::Result<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Offset of the first bracket that opens a level beyond `max`, if any. Strings are
/// skipped, so brackets inside them do not count. Every bracket is counted first, an
/// upper bound on the depth, so a body with few brackets is cleared in one cheap pass.
pub fn nesting_exceeds(body: &[u8], max: usize) -> Option<usize> {
    // `{` and `[` are the two bytes that read `{` with bit 5 set; counted a chunk at a time
    // into a byte, which compilers turn into wide compares.
    let opens: usize = body
        .chunks(usize::from(u8::MAX))
        .map(|chunk| {
            let count = chunk
                .iter()
                .fold(0u8, |count, &b| count + u8::from(b | 0x20 == b'{'));
            usize::from(count)
        })
        .sum();
    if opens <= max {
        return None;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return Some(i);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// A deserializer that reads a struct only from a map: everything else passes through.
pub(crate) struct ObjectOnly<D>(pub(crate) D);

/// Forwards `deserialize_<kind>(visitor)` to the wrapped deserializer.
macro_rules! forward {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.0.$method(visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    forward! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn integers_may_be_written_with_a_zero_fraction() {
        #[derive(serde::Deserialize)]
        struct Body {
            #[serde(default, deserialize_with = "super::optional_integer")]
            count: Option<i64>,
        }
        let count = |text: &str| serde_json::from_str::<Body>(text).map(|body| body.count);
        assert_eq!(count(r#"{"count": 3}"#).ok(), Some(Some(3)));
        assert_eq!(
            count(r#"{"count": 20363257.0}"#).ok(),
            Some(Some(20_363_257))
        );
        assert_eq!(count(r#"{"count": null}"#).ok(), Some(None));
        assert_eq!(count("{}").ok(), Some(None));
        for refused in [
            r#"{"count": 2.5}"#,
            r#"{"count": "3"}"#,
            r#"{"count": 1e300}"#,
        ] {
            assert!(count(refused).is_err(), "{refused}");
        }
    }

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Login {
        challenge: String,
        hash: String,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        #[serde(deserialize_with = "object")]
        inner: Login,
    }

    #[test]
    fn structs_come_only_from_objects() {
        assert_eq!(
            from_slice::<Login>(br#"{"challenge": "c", "hash": "h"}"#).ok(),
            Some(Login {
                challenge: "c".into(),
                hash: "h".into()
            })
        );
        // serde_json alone takes the positional form.
        assert!(serde_json::from_slice::<Login>(br#"["c", "h"]"#).is_ok());
        assert!(from_slice::<Login>(br#"["c", "h"]"#).is_err());
        assert!(from_slice::<Outer>(br#"{"inner": ["c", "h"]}"#).is_err());
        assert!(from_slice::<Outer>(br#"{"inner": {"challenge": "c", "hash": "h"}}"#).is_ok());
        // Nothing may follow the value.
        assert!(from_slice::<Login>(br#"{"challenge": "c", "hash": "h"} x"#).is_err());
        // Other shapes pass through unchanged.
        assert_eq!(
            from_slice::<std::collections::BTreeMap<String, Option<u8>>>(br#"{"a": null}"#)
                .ok()
                .and_then(|map| map.get("a").copied()),
            Some(None)
        );
    }

    #[test]
    fn nesting_is_bounded_outside_strings() {
        let deep = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        assert_eq!(nesting_exceeds(deep(5).as_bytes(), 5), None);
        assert_eq!(nesting_exceeds(deep(6).as_bytes(), 5), Some(5));
        let in_string = format!("[\"{}\\\"{}\"]", "[".repeat(10), "{".repeat(10));
        assert_eq!(nesting_exceeds(in_string.as_bytes(), 5), None);
        // Counts past a chunk's worth of brackets, mixed kinds.
        let mixed = |levels: usize| {
            let opens: String = (0..levels)
                .map(|l| if l % 2 == 0 { "{\"k\":" } else { "[" })
                .collect();
            let closes: String = (0..levels)
                .rev()
                .map(|l| if l % 2 == 0 { "}" } else { "]" })
                .collect();
            format!("{opens}1{closes}")
        };
        assert_eq!(nesting_exceeds(mixed(512).as_bytes(), 512), None);
        assert!(nesting_exceeds(mixed(513).as_bytes(), 512).is_some());
        let wide = format!("[{}]", vec!["[]"; 600].join(","));
        assert_eq!(nesting_exceeds(wide.as_bytes(), 512), None);
    }
}
