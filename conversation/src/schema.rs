//! Compiles the embedded ConversationInfo JSON Schemas into the validator tree (`tree`),
//! with the hooks (`hooks`) each `$defs` entry and property takes. Unions are compiled in
//! [`unions`].

mod unions;

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::hooks;
use super::pending::expected_list;
use super::tree::{
    Bound, Bounds, EMPTY, Field, KeyTable, Model, ModelId, Node, NodeId, StrFormat, Tree,
};

/// Both releases' models merged: what the fast path, redaction and the OpenAPI document
/// use.
pub(crate) static TREE: LazyLock<Tree> =
    LazyLock::new(|| compiled("merged", super::merge::merged_schema(), false));

/// Each release on its own, for the bodies the merged models refuse: one that either
/// release accepts is accepted, and a body both refuse gets 1.34.0's errors (the
/// reference receiver's).
pub(crate) static RELEASES: LazyLock<[Tree; 2]> = LazyLock::new(|| {
    [
        compiled("1.34", super::merge::schema_1_34(), true),
        compiled("1.58", super::merge::schema_1_58(), false),
    ]
});

fn compiled(name: &str, schema: Result<Value, String>, kind_needs_object: bool) -> Tree {
    match schema.and_then(Tree::compile) {
        Ok(tree) => Tree {
            kind_needs_object,
            ..tree
        },
        Err(e) => panic!("embedded ConversationInfo schema ({name}) does not compile: {e}"),
    }
}

impl Tree {
    fn compile(schema: Value) -> Result<Tree, String> {
        let defs = match schema.get("$defs") {
            Some(Value::Object(d)) => d.clone(),
            _ => return Err("no $defs".into()),
        };
        let mut c = Compiler {
            defs: &defs,
            tree: Tree {
                nodes: Vec::new(),
                models: Vec::new(),
                root: 0,
                kind_needs_object: false,
            },
            def_nodes: HashMap::new(),
        };
        let root = c.model("ConversationInfo", &schema)?;
        c.tree.root = root;
        Ok(c.tree)
    }
}

struct Compiler<'s> {
    defs: &'s Map<String, Value>,
    tree: Tree,
    def_nodes: HashMap<String, NodeId>,
}

fn ref_name(s: &Value) -> Option<&str> {
    s.get("$ref")?.as_str()?.strip_prefix("#/$defs/")
}

fn as_obj<'a>(s: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    s.as_object()
        .ok_or_else(|| format!("{what}: schema is not an object"))
}

fn bound(s: &Map<String, Value>, key: &str) -> Option<Bound> {
    let n = s.get(key)?.as_number()?;
    Some(Bound {
        value: n.as_f64()?,
        text: n.clone(),
    })
}

impl Compiler<'_> {
    fn push(&mut self, node: Node) -> NodeId {
        self.tree.nodes.push(node);
        (self.tree.nodes.len() - 1) as NodeId
    }

    fn def(&mut self, name: &str) -> Result<NodeId, String> {
        if let Some(id) = self.def_nodes.get(name) {
            return Ok(*id);
        }
        let defs = self.defs;
        let def = defs
            .get(name)
            .ok_or_else(|| format!("missing $defs entry {name}"))?;
        // Reserve the slot before compiling so recursive references resolve to it.
        let id = self.push(Node::Any);
        self.def_nodes.insert(name.to_owned(), id);
        let obj = as_obj(def, name)?;
        let node = if let Some(Value::Array(values)) = obj.get("enum") {
            let values = strings(values, name)?;
            Node::Enum {
                expected: expected_list(&values),
                values: values.into(),
            }
        } else if obj.contains_key("oneOf") {
            self.one_of(name, obj)?
        } else if obj.contains_key("properties") {
            let model = self.model(name, def)?;
            let model_node = self.push(Node::Model(model));
            match hooks::model_before_hook(name) {
                Some(hook) => Node::Before {
                    hook,
                    inner: model_node,
                },
                None => Node::Model(model),
            }
        } else {
            return Err(format!("$defs entry {name}: unsupported shape"));
        };
        self.tree.nodes[id as usize] = node;
        Ok(id)
    }

    fn model(&mut self, name: &str, def: &Value) -> Result<ModelId, String> {
        let obj = as_obj(def, name)?;
        let required: Vec<&str> = match obj.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut fields = Vec::new();
        if let Some(Value::Object(props)) = obj.get("properties") {
            for (prop, schema) in props {
                // DiscriminatedUnionMixin pops `kind` before the fields are validated.
                if prop == "kind" && schema.get("const").is_some() {
                    continue;
                }
                let what = format!("{name}.{prop}");
                let mut node = self.schema(schema, &what)?;
                if hooks::is_unmarked_secret(name, prop) {
                    node = self.mark_secret(node);
                }
                if hooks::is_variadic_tuple(name, prop)
                    && let Node::List { tuple, .. } = &mut self.tree.nodes[node as usize]
                {
                    *tuple = true;
                }
                if let Some(hook) = hooks::field_after_hook(name, prop) {
                    node = self.push(Node::After { hook, inner: node });
                }
                if let Some(hook) = hooks::field_before_hook(name, prop) {
                    node = self.push(Node::Before { hook, inner: node });
                }
                let model_default = hooks::model_default(name, prop);
                fields.push(Field {
                    name: prop.clone(),
                    by_name: hooks::populated_by_name(name, prop),
                    node,
                    required: required.contains(&prop.as_str()) && model_default.is_none(),
                    default: model_default.or_else(|| schema.get("default").cloned()),
                });
            }
        }
        if fields.len() >= usize::from(EMPTY) {
            return Err(format!("{name}: too many fields"));
        }
        let keys = KeyTable::build(&fields);
        self.tree.models.push(Model {
            name: name.to_owned(),
            fields: fields.into(),
            keys,
            forbid_extra: obj.get("additionalProperties") == Some(&Value::Bool(false)),
            after: hooks::model_after_hook(name),
        });
        Ok((self.tree.models.len() - 1) as ModelId)
    }

    /// Makes a position secret that the schema leaves plain: strings (alone, in an
    /// Optional, as dict values, or as the string member of a union) get redacted.
    fn mark_secret(&mut self, id: NodeId) -> NodeId {
        let replacement = match &self.tree.nodes[id as usize] {
            Node::Str { .. } | Node::Any => return self.push(Node::Secret(id)),
            Node::Nullable(inner) => {
                let inner = *inner;
                Node::Nullable(self.mark_secret(inner))
            }
            Node::Dict { values: Some(v) } => {
                let v = *v;
                Node::Dict {
                    values: Some(self.mark_secret(v)),
                }
            }
            Node::Union {
                members,
                labels,
                secret,
            } => {
                let (members, labels, secret) = (members.clone(), labels.clone(), *secret);
                let members = members
                    .iter()
                    .map(|m| match self.tree.nodes[*m as usize] {
                        Node::Str { .. } => self.push(Node::Secret(*m)),
                        _ => *m,
                    })
                    .collect();
                Node::Union {
                    members,
                    labels,
                    secret,
                }
            }
            _ => return id,
        };
        self.push(replacement)
    }

    fn schema(&mut self, s: &Value, what: &str) -> Result<NodeId, String> {
        if let Some(name) = ref_name(s) {
            return self.def(name);
        }
        let obj = as_obj(s, what)?;
        if let Some(Value::Array(any_of)) = obj.get("anyOf") {
            return self.any_of(any_of, what);
        }
        if obj.contains_key("oneOf") {
            let node = self.one_of(what, obj)?;
            return Ok(self.push(node));
        }
        if let Some(c) = obj.get("const") {
            let v = c
                .as_str()
                .ok_or_else(|| format!("{what}: non-string const"))?;
            let values = vec![v.to_owned()];
            return Ok(self.push(Node::Literal {
                expected: expected_list(&values),
                values: values.into(),
            }));
        }
        if let Some(Value::Array(values)) = obj.get("enum") {
            let values = strings(values, what)?;
            return Ok(self.push(Node::Literal {
                expected: expected_list(&values),
                values: values.into(),
            }));
        }
        let secret = obj.get("format").and_then(Value::as_str) == Some("password")
            || obj.get("writeOnly") == Some(&Value::Bool(true));
        let node = match obj.get("type").and_then(Value::as_str) {
            None => Node::Any,
            Some("null") => Node::Null,
            Some("boolean") => Node::Bool,
            Some("integer") => Node::Int(bounds(obj)),
            Some("number") => Node::Float(bounds(obj)),
            Some("string") => {
                let format = match obj.get("format").and_then(Value::as_str) {
                    Some("uuid") => StrFormat::Uuid,
                    Some("date-time") => StrFormat::DateTime,
                    None | Some("password") | Some("path") => StrFormat::Plain,
                    Some(f) => return Err(format!("{what}: unsupported string format {f}")),
                };
                let min_len = obj
                    .get("minLength")
                    .and_then(Value::as_u64)
                    .map(|n| n as usize);
                Node::Str { min_len, format }
            }
            Some("array") => self.array(obj, what)?,
            Some("object") => {
                if obj.contains_key("properties") {
                    return Err(format!("{what}: inline object with properties"));
                }
                let values = match obj.get("additionalProperties") {
                    Some(v @ Value::Object(_)) => Some(self.schema(v, what)?),
                    _ => None,
                };
                Node::Dict { values }
            }
            Some(t) => return Err(format!("{what}: unsupported type {t}")),
        };
        let id = self.push(node);
        Ok(if secret {
            self.push(Node::Secret(id))
        } else {
            id
        })
    }

    fn array(&mut self, obj: &Map<String, Value>, what: &str) -> Result<Node, String> {
        if let Some(Value::Array(prefix)) = obj.get("prefixItems") {
            let items = prefix
                .iter()
                .map(|p| self.schema(p, what))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Node::Tuple {
                items: items.into(),
            });
        }
        let items = match obj.get("items") {
            Some(i) => Some(self.schema(i, what)?),
            None => None,
        };
        let min_items = obj
            .get("minItems")
            .and_then(Value::as_u64)
            .map(|n| n as usize);
        let max_items = obj
            .get("maxItems")
            .and_then(Value::as_u64)
            .map(|n| n as usize);
        Ok(Node::List {
            items,
            min_items,
            max_items,
            tuple: false,
        })
    }
}

fn bounds(obj: &Map<String, Value>) -> Bounds {
    Bounds {
        ge: bound(obj, "minimum"),
        gt: bound(obj, "exclusiveMinimum"),
        le: bound(obj, "maximum"),
        lt: bound(obj, "exclusiveMaximum"),
    }
}

fn strings(values: &[Value], what: &str) -> Result<Vec<String>, String> {
    values
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{what}: non-string enum value"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_schema_compiles() {
        let tree = crate::merge::merged_schema()
            .and_then(Tree::compile)
            .unwrap_or_else(|e| panic!("{e}"));
        let root = tree.model(tree.root);
        assert_eq!(root.name, "ConversationInfo");
        assert!(root.keys.find(&root.fields, "agent").is_some());
        assert!(root.keys.find(&root.fields, "nope").is_none());
        // Fields only one release has are both present.
        let llm = tree
            .models
            .iter()
            .find(|m| m.name == "LLM")
            .map(|m| m.keys.find(&m.fields, "modify_params"));
        assert_eq!(llm.map(|f| f.is_some()), Some(true));
        let mcp = tree.models.iter().find(|m| m.name == "MCPServer");
        assert!(mcp.is_some_and(|m| m.forbid_extra && m.keys.find(&m.fields, "enabled").is_some()));
    }
}
