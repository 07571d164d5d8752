//! The validator tree the schema compiler (`schema`) builds and both walkers read: an
//! arena, where nodes refer to each other by index, so recursive `$defs` (an ensemble
//! analyzer holding analyzers) need no reference counting, and every `$ref` to one
//! definition shares one node.

use serde_json::{Number, Value};

use crate::hooks::{AfterHook, BeforeHook, FieldHook};

pub(crate) type NodeId = u32;
pub(crate) type ModelId = u32;

pub(crate) struct Tree {
    pub nodes: Vec<Node>,
    pub models: Vec<Model>,
    pub root: ModelId,
    /// 1.34.0's `DiscriminatedUnionMixin` pops `kind` from whatever it is given: a value
    /// that is not an object where a kind union stands crashes it (a 500), and the
    /// reference is the other release's answer.
    pub kind_needs_object: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrFormat {
    Plain,
    Uuid,
    DateTime,
}

/// A bound kept twice: as f64 to compare, and as the schema's number for messages.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    pub value: f64,
    pub text: Number,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Bounds {
    pub ge: Option<Bound>,
    pub gt: Option<Bound>,
    pub le: Option<Bound>,
    pub lt: Option<Bound>,
}

impl Bounds {
    pub(crate) fn is_empty(&self) -> bool {
        self.ge.is_none() && self.gt.is_none() && self.le.is_none() && self.lt.is_none()
    }
}

#[derive(Debug)]
pub(crate) enum Node {
    /// Accepts anything (`{}` schema).
    Any,
    Null,
    Str {
        min_len: Option<usize>,
        format: StrFormat,
    },
    Int(Bounds),
    Float(Bounds),
    Bool,
    /// Python `Literal[...]` (inline `enum` / `const`).
    Literal {
        values: Box<[String]>,
        expected: String,
    },
    /// A Python `Enum` class (a `$defs` entry with `enum`).
    Enum {
        values: Box<[String]>,
        expected: String,
    },
    List {
        items: Option<NodeId>,
        min_items: Option<usize>,
        max_items: Option<usize>,
        /// A Python `tuple[T, ...]`, which JSON Schema shows as an array: its errors
        /// name a tuple.
        tuple: bool,
    },
    Tuple {
        items: Box<[NodeId]>,
    },
    Dict {
        values: Option<NodeId>,
    },
    Model(ModelId),
    /// OpenHands' `kind` dispatch (DiscriminatedUnionMixin).
    KindUnion(Box<KindUnion>),
    /// pydantic's `Field(discriminator=...)` union.
    TaggedUnion(Box<TaggedUnion>),
    Nullable(NodeId),
    /// Smart-mode union. `secret`: the whole position is a secret (`str | SecretStr`).
    Union {
        members: Box<[NodeId]>,
        labels: Box<[String]>,
        secret: bool,
    },
    /// Redact the value once validated.
    Secret(NodeId),
    /// A Python `mode="before"` validator in front of `inner`.
    Before {
        hook: BeforeHook,
        inner: NodeId,
    },
    /// A Python field validator (`mode="after"`) behind `inner`: it sees the value only
    /// once `inner` accepted it.
    After {
        hook: FieldHook,
        inner: NodeId,
    },
}

#[derive(Debug)]
pub(crate) struct KindUnion {
    pub base: String,
    pub qualname: String,
    pub variants: Box<[(String, NodeId)]>,
    /// `['A', 'B']`, in the schema's `oneOf` order.
    pub expected: String,
}

#[derive(Debug)]
pub(crate) struct TaggedUnion {
    pub prop: String,
    pub variants: Box<[(String, NodeId)]>,
    pub expected: String,
}

#[derive(Debug)]
pub(crate) struct Field {
    pub name: String,
    /// The Python attribute's name where the key is an alias and the model populates by
    /// name too (`HookDefinition.async_`, alias `async`): either key is the field.
    pub by_name: Option<&'static str>,
    pub node: NodeId,
    pub required: bool,
    /// What the model holds when the key is absent (the schema's `default`), for the
    /// model validators that read the field.
    pub default: Option<Value>,
}

#[derive(Debug)]
pub(crate) struct Model {
    pub name: String,
    pub fields: Box<[Field]>,
    pub keys: KeyTable,
    pub forbid_extra: bool,
    pub after: Option<AfterHook>,
}

/// Open-addressing FNV-1a table from a field name to its position: a lookup hashes the
/// borrowed key and compares once, with no allocation.
#[derive(Debug)]
pub(crate) struct KeyTable {
    slots: Box<[u16]>,
    mask: usize,
}

pub(crate) const EMPTY: u16 = u16::MAX;

fn fnv1a(s: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h ^ (h >> 29)) as usize
}

impl KeyTable {
    pub(crate) fn build(fields: &[Field]) -> KeyTable {
        let names = fields.len() + fields.iter().filter(|f| f.by_name.is_some()).count();
        let cap = (names * 2).next_power_of_two().max(4);
        let mut slots = vec![EMPTY; cap].into_boxed_slice();
        let mask = cap - 1;
        for (i, f) in fields.iter().enumerate() {
            for name in std::iter::once(f.name.as_str()).chain(f.by_name) {
                let mut pos = fnv1a(name) & mask;
                while slots[pos] != EMPTY {
                    pos = (pos + 1) & mask;
                }
                slots[pos] = i as u16;
            }
        }
        KeyTable { slots, mask }
    }

    #[inline]
    pub fn find(&self, fields: &[Field], key: &str) -> Option<usize> {
        let mut pos = fnv1a(key) & self.mask;
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                return None;
            }
            let field = &fields[slot as usize];
            if field.name == key || field.by_name == Some(key) {
                return Some(slot as usize);
            }
            pos = (pos + 1) & self.mask;
        }
    }
}

impl Tree {
    #[inline]
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    #[inline]
    pub fn model(&self, id: ModelId) -> &Model {
        &self.models[id as usize]
    }
}
