//! A JSON tree that borrows its strings from the body: the fast path's representation.
//!
//! Building a `serde_json::Value` (an ordered map per object, an owned `String` per key and
//! string) was most of a delivery's CPU. This tree is parsed by the same serde_json parser,
//! so it accepts exactly the same bodies, and keeps `Value`'s semantics where they show:
//! an object keeps its keys' first positions and a repeated key's last value, and it
//! serializes through serde_json into the same text as the `Value` would.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

use super::scalars::Scalar;
use super::summary::RecordNode;

/// Past this many keys an object would make the linear duplicate check slow; such a body
/// takes the `Value` path instead.
const MAX_OBJECT_KEYS: usize = 128;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Object<'a>),
}

/// Keys in first-seen order, each once.
pub(crate) type Object<'a> = Vec<(Cow<'a, str>, Json<'a>)>;

/// What the summary and the model validators read of a record, on the borrowed tree.
impl RecordNode for Json<'_> {
    fn field(&self, key: &str) -> Option<&Self> {
        get(self.as_object()?, key)
    }

    fn item(&self, index: usize) -> Option<&Self> {
        match self {
            Json::Array(items) => items.get(index),
            _ => None,
        }
    }

    fn keys(&self) -> Option<Vec<&str>> {
        Some(
            self.as_object()?
                .iter()
                .map(|(key, _)| key.as_ref())
                .collect(),
        )
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }

    fn string_entries(&self) -> Option<BTreeMap<String, String>> {
        Some(
            self.as_object()?
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.to_string(), v.to_owned())))
                .collect(),
        )
    }

    fn scalar(&self) -> Scalar<'_> {
        self.into()
    }
}

impl crate::redact::Redactable for Json<'_> {
    fn each_entry(&mut self, f: &mut dyn FnMut(&str, &mut Self)) -> bool {
        let Json::Object(object) = self else {
            return false;
        };
        object.iter_mut().for_each(|(key, value)| f(key, value));
        true
    }

    fn each_item(&mut self, f: &mut dyn FnMut(&mut Self)) -> bool {
        let Json::Array(items) = self else {
            return false;
        };
        items.iter_mut().for_each(f);
        true
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }

    fn set_text(&mut self, text: String) {
        *self = Json::String(Cow::Owned(text));
    }
}

impl<'a> Json<'a> {
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object<'a>> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }
}

impl<'b> From<&'b Json<'_>> for Scalar<'b> {
    fn from(v: &'b Json<'_>) -> Self {
        match v {
            Json::Null => Scalar::Null,
            Json::Bool(b) => Scalar::Bool(*b),
            Json::Number(n) => Scalar::Number(n),
            Json::String(s) => Scalar::String(s),
            Json::Array(_) | Json::Object(_) => Scalar::Compound,
        }
    }
}

/// The value at `key`, as `serde_json::Map::get` finds it.
pub(crate) fn get<'o, 'a>(object: &'o Object<'a>, key: &str) -> Option<&'o Json<'a>> {
    object.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Parses `text`; `None` when serde_json rejects it (or an object is too wide), so the
/// caller takes the `Value` path, which reports the error.
pub(crate) fn parse(text: &[u8]) -> Option<Json<'_>> {
    // One UTF-8 check of the whole body instead of one per string: bytes that are not
    // UTF-8 are refused either way (in a string by `from_slice`, elsewhere as bad syntax),
    // and a `&str` reader checks no string again.
    let text = std::str::from_utf8(text).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    // The caller has bounded the depth, as `parse::parse_json` does.
    de.disable_recursion_limit();
    let value = JsonSeed.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(value)
}

struct JsonSeed;

impl<'de> DeserializeSeed<'de> for JsonSeed {
    type Value = Json<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        // As `parse::ValueVisitor` (and serde_json's own) builds it.
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Json::String(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Json::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(JsonSeed)? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out: Object<'de> = Vec::with_capacity(8);
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(JsonSeed)?;
            // `IndexMap::insert`: a repeated key keeps its first position, takes the value.
            let wide = out.len() == MAX_OBJECT_KEYS;
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, slot)) => *slot = value,
                None if wide => {
                    return Err(serde::de::Error::custom(
                        "object too wide for the fast path",
                    ));
                }
                None => out.push((key, value)),
            }
        }
        Ok(Json::Object(out))
    }
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k.as_ref(), v)?;
                }
                map.end()
            }
        }
    }
}
