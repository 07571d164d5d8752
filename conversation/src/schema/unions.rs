//! The unions of the ConversationInfo schemas compiled: `anyOf` (optional values, and
//! smart-mode unions with pydantic-core's labels for their members, which locate its
//! errors) and discriminated `oneOf` (tagged unions and OpenHands' kind unions).

use serde_json::{Map, Value};

use super::{Compiler, ref_name};
use crate::hooks;
use crate::pending::{expected_list, python_str_list};
use crate::tree::{KindUnion, Node, NodeId, StrFormat, TaggedUnion};

impl Compiler<'_> {
    /// An `anyOf`: `Optional[...]` (a member `null`), one type, or a smart-mode union of
    /// several, whose members pydantic-core labels in its errors.
    pub(super) fn any_of(&mut self, any_of: &[Value], what: &str) -> Result<NodeId, String> {
        let nullable = any_of
            .iter()
            .any(|m| m.get("type").and_then(Value::as_str) == Some("null"));
        let others: Vec<&Value> = any_of
            .iter()
            .filter(|m| m.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        let inner = match others.as_slice() {
            [] => self.push(Node::Null),
            [one] => self.schema(one, what)?,
            many => {
                let mut members = Vec::new();
                let mut secret = false;
                for m in many {
                    let mut id = self.schema(m, what)?;
                    // `str | SecretStr`: the whole position is secret, and members must see
                    // the value unredacted while the union tries them.
                    if let Node::Secret(inner) = self.tree.nodes[id as usize] {
                        secret = true;
                        id = inner;
                    }
                    members.push(id);
                }
                let labels = members.iter().map(|m| self.label(*m)).collect::<Vec<_>>();
                self.push(Node::Union {
                    members: members.into(),
                    labels: labels.into(),
                    secret,
                })
            }
        };
        if nullable && !others.is_empty() {
            // A secret Optional stays a secret; keep the wrapper outside so null passes.
            Ok(self.push(Node::Nullable(inner)))
        } else {
            Ok(inner)
        }
    }

    /// A discriminated `oneOf`: a tagged union (pydantic's, its mapping keyed by the tags)
    /// or a kind union (OpenHands', keyed by mangled class paths).
    pub(super) fn one_of(&mut self, what: &str, obj: &Map<String, Value>) -> Result<Node, String> {
        let prop = obj
            .get("discriminator")
            .and_then(|d| d.get("propertyName"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{what}: oneOf without discriminator"))?
            .to_owned();
        let mapping = obj
            .get("discriminator")
            .and_then(|d| d.get("mapping"))
            .and_then(Value::as_object);
        let refs = match obj.get("oneOf") {
            Some(Value::Array(r)) => r,
            _ => return Err(format!("{what}: oneOf is not a list")),
        };
        let mut variants = Vec::new();
        let mut is_kind_union = false;
        for r in refs {
            let name = ref_name(r).ok_or_else(|| format!("{what}: oneOf member without $ref"))?;
            let tag = self
                .defs
                .get(name)
                .and_then(|d| d.get("properties"))
                .and_then(|p| p.get(&prop))
                .and_then(|p| p.get("const"))
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{what}: variant {name} has no const {prop}"))?
                .to_owned();
            // OpenHands' kind unions map mangled class paths, pydantic's map the tag itself.
            if mapping.is_some_and(|m| !m.contains_key(&tag)) {
                is_kind_union = true;
            }
            let node = self.def(name)?;
            variants.push((tag, node));
        }
        let tags: Vec<String> = variants.iter().map(|(t, _)| t.clone()).collect();
        Ok(if is_kind_union {
            Node::KindUnion(Box::new(KindUnion {
                base: what.to_owned(),
                qualname: hooks::kind_base_qualname(what),
                expected: python_str_list(&tags),
                variants: variants.into(),
            }))
        } else {
            Node::TaggedUnion(Box::new(TaggedUnion {
                prop,
                expected: expected_list(&tags),
                variants: variants.into(),
            }))
        })
    }

    /// pydantic-core's name for a union member, used as the loc segment of its errors.
    fn label(&self, id: NodeId) -> String {
        match &self.tree.nodes[id as usize] {
            Node::Any => "any".into(),
            Node::Null => "none".into(),
            Node::Str {
                format: StrFormat::Uuid,
                ..
            } => "uuid".into(),
            Node::Str {
                format: StrFormat::DateTime,
                ..
            } => "datetime".into(),
            Node::Str {
                min_len: Some(_), ..
            } => "constrained-str".into(),
            Node::Str { .. } | Node::Secret(_) => "str".into(),
            Node::Int(b) if b.is_empty() => "int".into(),
            Node::Int(_) => "constrained-int".into(),
            Node::Float(b) if b.is_empty() => "float".into(),
            Node::Float(_) => "constrained-float".into(),
            Node::Bool => "bool".into(),
            Node::Literal { values, .. } => {
                let quoted: Vec<String> = values.iter().map(|v| format!("'{v}'")).collect();
                format!("literal[{}]", quoted.join(","))
            }
            Node::Model(m) => self.tree.models[*m as usize].name.clone(),
            Node::Before { inner, .. } | Node::After { inner, .. } => self.label(*inner),
            Node::KindUnion(k) => k.base.clone(),
            Node::Enum { .. } => self.def_name(id).unwrap_or_else(|| "enum".into()),
            Node::List { items, .. } => match items {
                Some(i) => format!("list[{}]", self.label(*i)),
                None => "list[any]".into(),
            },
            Node::Tuple { .. } => "tuple".into(),
            Node::Dict { values } => match values {
                Some(v) => format!("dict[str,{}]", self.label(*v)),
                None => "dict[str,any]".into(),
            },
            Node::TaggedUnion(_) => "tagged-union".into(),
            Node::Nullable(i) => format!("nullable[{}]", self.label(*i)),
            Node::Union { .. } => "union".into(),
        }
    }

    fn def_name(&self, id: NodeId) -> Option<String> {
        self.def_nodes
            .iter()
            .find(|(_, v)| **v == id)
            .map(|(k, _)| k.clone())
    }
}
